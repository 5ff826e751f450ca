// Quantized tensors in safetensors files, as companion tensors named by convention, so
// checkpoints and archives carry them with the plain tensors:
//   "<name>"             the integers (U8 for quint8, I8 for qint8), in the tensor's shape
//   "<name>.scale"       one per channel ([1] per tensor): F32 when every scale is a float32
//                        value (as observers make them), else F64
//   "<name>.zero_point"  I32, shaped as the scales (readers also take I64)
// and the metadata entry "<name>.quant" = {"dtype":"qint8","qscheme":"per_channel_affine","axis":0}
// (JSON), which marks "<name>" as quantized.
#pragma once

#include <string>

#include "core/io/safetensors.h"
#include "core/quant/qtensor.h"

namespace anvil::quant {

// The metadata key that marks `name` as quantized.
std::string qtensor_metadata_key(const std::string& name);

// Appends q's three tensors to `tensors` and its entry to `metadata`.
void append_qtensor(const std::string& name, const QTensor& q, io::NamedTensors* tensors, io::Metadata* metadata);

// Whether `file` holds a quantized tensor called `name` (its metadata entry is there).
bool has_qtensor(const io::Safetensors& file, const std::string& name);

// Reads back what append_qtensor wrote; errors name the tensor and what is missing or
// inconsistent (a companion absent, a dtype or shape that does not fit the entry).
QTensor read_qtensor(const io::Safetensors& file, const std::string& name);

}  // namespace anvil::quant
