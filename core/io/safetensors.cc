// safetensors reading and writing: see safetensors.h.
#include "core/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/ops/functions.h"
#include "core/util/error.h"
#include "core/util/file.h"

namespace anvil::io {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::pair<ScalarType, const char*> kDtypeNames[] = {
    {kFloat64, "F64"}, {kFloat32, "F32"}, {kFloat16, "F16"}, {kBFloat16, "BF16"}, {kInt64, "I64"},
    {kInt32, "I32"},   {kInt16, "I16"},   {kInt8, "I8"},     {kUInt8, "U8"},      {kBool, "BOOL"}};

ScalarType DtypeFromName(const std::string& name, const std::string& where) {
  for (const auto& [dt, n] : kDtypeNames) {
    if (name == n) return dt;
  }
  throw Error(where + ": unsupported dtype '" + name +
              "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
}

uint64_t ReadLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

std::string safetensors_dtype_name(ScalarType dtype) {
  for (const auto& [dt, n] : kDtypeNames) {
    if (dt == dtype) return n;
  }
  throw TypeError("safetensors: no dtype name for this dtype");
}

const Tensor* Safetensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ANVIL_CHECK(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name '", name, "'");
    ANVIL_CHECK(!header.contains(name), "safetensors: duplicate tensor name '", name, "'");
    ANVIL_CHECK(t.defined(), "safetensors: tensor '", name, "' is undefined");
    const Tensor c = t.detach().to(kCPU).contiguous();
    const auto bytes = static_cast<uint64_t>(c.numel() * itemsize(c.dtype()));
    header[name] = {
        {"dtype", safetensors_dtype_name(c.dtype())}, {"shape", c.sizes()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(c);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += json;
  for (const Tensor& c : contiguous) {
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * itemsize(c.dtype())));
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

Safetensors parse_safetensors(std::string_view bytes, const std::string& source) {
  ANVIL_CHECK(bytes.size() >= 8, source, ": not a safetensors file: ", bytes.size(),
              " bytes, fewer than the 8-byte "
              "header length");
  const uint64_t n = ReadLE64(bytes.data());
  ANVIL_CHECK(n <= bytes.size() - 8, source, ": truncated or not a safetensors file: the header length says ", n,
              " bytes but only ", bytes.size() - 8, " follow");
  Json header;
  try {
    header = Json::parse(bytes.substr(8, n));
  } catch (const std::exception& e) {
    throw Error(source + ": the safetensors header is not valid JSON: " + e.what());
  }
  ANVIL_CHECK(header.is_object(), source, ": the safetensors header is not a JSON object");
  const std::string_view data = bytes.substr(8 + n);
  Safetensors out;
  struct Entry {
    uint64_t begin, end;
    std::string name;
    ScalarType dtype;
    IntArray shape;
  };
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      ANVIL_CHECK(info.is_object(), source, ": __metadata__ must be an object of strings");
      for (const auto& [k, v] : info.items()) {
        ANVIL_CHECK(v.is_string(), source, ": __metadata__['", k, "'] is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = source + ": tensor '" + name + "'";
    ANVIL_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
                where, ": expected dtype, shape and data_offsets");
    ANVIL_CHECK(info["dtype"].is_string(), where, ": dtype must be a string such as \"F32\", got ",
                info["dtype"].type_name());
    ANVIL_CHECK(info["shape"].is_array(), where, ": shape must be an array of non-negative integers, got ",
                info["shape"].type_name());
    Entry e{0, 0, name, DtypeFromName(info["dtype"].get<std::string>(), where), {}};
    uint64_t numel = 1;
    for (const auto& d : info["shape"]) {
      ANVIL_CHECK(d.is_number_unsigned(), where, ": shape entries must be non-negative integers");
      const auto v = d.get<uint64_t>();
      ANVIL_CHECK(v == 0 || numel <= std::numeric_limits<uint64_t>::max() / v, where, ": shape overflows");
      numel *= v;
      e.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = info["data_offsets"];
    ANVIL_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
                ": data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    const auto size = static_cast<uint64_t>(itemsize(e.dtype));
    ANVIL_CHECK(numel <= std::numeric_limits<uint64_t>::max() / size, where, ": byte size overflows");
    ANVIL_CHECK(e.begin <= e.end && e.end <= data.size(), where, ": data_offsets [", e.begin, ", ", e.end,
                "] fall outside the ", data.size(), " data bytes (truncated file?)");
    ANVIL_CHECK(e.end - e.begin == numel * size, where, ": holds ", e.end - e.begin,
                " bytes but its shape and dtype need ", numel * size);
    entries.push_back(std::move(e));
  }
  // By start, then end: an empty tensor shares its start with the next one (the reference
  // writer puts [k, k] right before [k, k + n]) and must sort before it.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  for (size_t i = 1; i < entries.size(); ++i) {
    ANVIL_CHECK(entries[i].begin >= entries[i - 1].end, source, ": tensors '", entries[i - 1].name, "' and '",
                entries[i].name, "' overlap");
  }
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data.data() + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

Safetensors load_safetensors(const std::string& path) { return parse_safetensors(read_file(path), path); }

}  // namespace anvil::io
