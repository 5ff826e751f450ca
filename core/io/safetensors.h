// The safetensors format (the weights format of the wider ecosystem): an 8-byte little-endian
// header length N, N bytes of JSON mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} plus an optional "__metadata__" map of strings, then the raw
// little-endian data. Anvil writes tensors back to back in the given order, the header padded
// with spaces to a multiple of 8 bytes (as the reference writer does).
//
// Reading validates everything before allocating tensors: the header length against the file
// size, the JSON, each dtype and shape, byte counts (checked multiplication), offsets inside
// the data and not overlapping. Errors name the file and the offending tensor.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

struct Safetensors {
  NamedTensors tensors;  // in file (data offset) order
  Metadata metadata;
  const Tensor* find(const std::string& name) const;
};

// The complete file content.
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
// Writes atomically (temporary file, fsync, rename).
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
// `source` names the bytes in errors (a path, "upload", ...).
Safetensors parse_safetensors(std::string_view bytes, const std::string& source);
Safetensors load_safetensors(const std::string& path);

// The format's dtype names: "F32", "BF16", "I64", "BOOL", ...
std::string safetensors_dtype_name(ScalarType dtype);

}  // namespace anvil::io
