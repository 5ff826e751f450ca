#include "server/kserve_wire.h"

#include <cstring>

#include "server/status.h"

namespace anvil::server {
namespace {

constexpr KServeType kTypes[] = {
    {"FP32", v1::FLOAT32, inference::TYPE_FP32}, {"FP64", v1::FLOAT64, inference::TYPE_FP64},
    {"FP16", v1::FLOAT16, inference::TYPE_FP16}, {"BF16", v1::BFLOAT16, inference::TYPE_BF16},
    {"INT64", v1::INT64, inference::TYPE_INT64}, {"INT32", v1::INT32, inference::TYPE_INT32},
    {"UINT8", v1::UINT8, inference::TYPE_UINT8}, {"BOOL", v1::BOOL, inference::TYPE_BOOL},
};

// The elements of a tensor sent in its typed contents field, as raw little-endian bytes.
template <typename Out, typename Field>
std::string Pack(const Field& values) {
  std::string raw(static_cast<size_t>(values.size()) * sizeof(Out), '\0');
  for (int i = 0; i < values.size(); ++i) {
    const Out v = static_cast<Out>(values.Get(i));
    std::memcpy(raw.data() + static_cast<size_t>(i) * sizeof(Out), &v, sizeof(Out));
  }
  return raw;
}

std::string ContentsAsRaw(const inference::InferTensorContents& c, const KServeType& t, const std::string& what) {
  switch (t.dtype) {
    case v1::FLOAT32:
      return Pack<float>(c.fp32_contents());
    case v1::FLOAT64:
      return Pack<double>(c.fp64_contents());
    case v1::INT64:
      return Pack<int64_t>(c.int64_contents());
    case v1::INT32:
      return Pack<int32_t>(c.int_contents());
    case v1::UINT8:
      return Pack<uint8_t>(c.uint_contents());
    case v1::BOOL:
      return Pack<uint8_t>(c.bool_contents());
    default:
      throw ServiceError(absl::StatusCode::kInvalidArgument,
                         what + ": " + t.kserve + " has no typed contents field; send it in raw_input_contents");
  }
}

}  // namespace

const KServeType& kserve_type_by_name(const std::string& datatype, const std::string& what) {
  for (const KServeType& t : kTypes) {
    if (datatype == t.kserve) return t;
  }
  throw ServiceError(absl::StatusCode::kInvalidArgument,
                     what + ": datatype \"" + datatype +
                         "\" is not served; expected FP32, FP64, FP16, BF16, INT64, INT32, UINT8 or BOOL");
}

const KServeType& kserve_type_of(v1::DType dtype) {
  for (const KServeType& t : kTypes) {
    if (dtype == t.dtype) return t;
  }
  throw ServiceError(absl::StatusCode::kInternal,
                     "a model tensor of dtype " + v1::DType_Name(dtype) + " has no KServe name");
}

std::string kserve_version(const std::string& v) { return v.empty() ? "latest" : v; }

v1::PredictRequest predict_request_of(const inference::ModelInferRequest& req) {
  ANVIL_SERVICE_CHECK(!req.model_name().empty(), absl::StatusCode::kInvalidArgument,
                      "model_name: expected a model name");
  const bool raw = req.raw_input_contents_size() > 0;
  ANVIL_SERVICE_CHECK(!raw || req.raw_input_contents_size() == req.inputs_size(), absl::StatusCode::kInvalidArgument,
                      "raw_input_contents: expected one per input (", req.inputs_size(), "), got ",
                      req.raw_input_contents_size());
  v1::PredictRequest p;
  p.set_model(req.model_name());
  p.set_version(kserve_version(req.model_version()));
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    const std::string what = "input \"" + in.name() + "\"";
    const KServeType& t = kserve_type_by_name(in.datatype(), what);
    v1::Tensor* tensor = p.add_inputs();
    tensor->set_name(in.name());
    tensor->set_dtype(t.dtype);
    for (int64_t d : in.shape()) tensor->add_shape(d);
    ANVIL_SERVICE_CHECK(!raw || !in.has_contents(), absl::StatusCode::kInvalidArgument, what,
                        ": contents and raw_input_contents are exclusive; send one of them");
    tensor->set_raw(raw ? req.raw_input_contents(i) : ContentsAsRaw(in.contents(), t, what));
  }
  return p;
}

}  // namespace anvil::server
