// The quantized element types and schemes of PyTorch's eager quantization (torch.quint8,
// torch.qint8; torch.per_tensor_affine, ...), their names and integer ranges.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/tensor/dtype.h"

namespace anvil::quant {

// torch.quint8 stores uint8, torch.qint8 int8.
enum class QDtype { QUInt8, QInt8 };

enum class QScheme { PerTensorAffine, PerTensorSymmetric, PerChannelAffine, PerChannelSymmetric };

// "quint8" / "qint8", as PyTorch prints them after "torch.".
const char* qdtype_name(QDtype d);
// "per_tensor_affine", ...
const char* qscheme_name(QScheme s);
// Parses the names above; the error lists the accepted ones.
QDtype qdtype_from_name(const std::string& name);
QScheme qscheme_from_name(const std::string& name);

// The integer storage of a quantized dtype (kUInt8 for quint8, kInt8 for qint8).
ScalarType storage_dtype(QDtype d);
// The full range of the storage type: [0, 255] or [-128, 127].
std::pair<int64_t, int64_t> qdtype_range(QDtype d);

inline bool is_per_channel(QScheme s) { return s == QScheme::PerChannelAffine || s == QScheme::PerChannelSymmetric; }
inline bool is_symmetric(QScheme s) { return s == QScheme::PerTensorSymmetric || s == QScheme::PerChannelSymmetric; }

}  // namespace anvil::quant
