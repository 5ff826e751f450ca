#include "core/quant/qscheme.h"

#include "core/util/error.h"

namespace anvil::quant {

const char* qdtype_name(QDtype d) { return d == QDtype::QUInt8 ? "quint8" : "qint8"; }

const char* qscheme_name(QScheme s) {
  switch (s) {
    case QScheme::PerTensorAffine:
      return "per_tensor_affine";
    case QScheme::PerTensorSymmetric:
      return "per_tensor_symmetric";
    case QScheme::PerChannelAffine:
      return "per_channel_affine";
    case QScheme::PerChannelSymmetric:
      return "per_channel_symmetric";
  }
  return "?";
}

QDtype qdtype_from_name(const std::string& name) {
  if (name == "quint8") return QDtype::QUInt8;
  if (name == "qint8") return QDtype::QInt8;
  ANVIL_CHECK_TYPE(false, "expected a quantized dtype (quint8 or qint8), got '", name, "'");
  return QDtype::QUInt8;
}

QScheme qscheme_from_name(const std::string& name) {
  for (QScheme s : {QScheme::PerTensorAffine, QScheme::PerTensorSymmetric, QScheme::PerChannelAffine,
                    QScheme::PerChannelSymmetric}) {
    if (name == qscheme_name(s)) return s;
  }
  ANVIL_CHECK(false,
              "expected a quantization scheme (per_tensor_affine, per_tensor_symmetric, per_channel_affine or "
              "per_channel_symmetric), got '",
              name, "'");
  return QScheme::PerTensorAffine;
}

ScalarType storage_dtype(QDtype d) { return d == QDtype::QUInt8 ? kUInt8 : kInt8; }

std::pair<int64_t, int64_t> qdtype_range(QDtype d) {
  return d == QDtype::QUInt8 ? std::pair<int64_t, int64_t>{0, 255} : std::pair<int64_t, int64_t>{-128, 127};
}

}  // namespace anvil::quant
