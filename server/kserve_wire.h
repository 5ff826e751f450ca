// KServe v2 (Open Inference Protocol) requests as Anvil's: the datatype names, the typed
// contents fields read as raw little-endian bytes, and a ModelInferRequest converted to the
// PredictRequest the model registry runs (which checks shapes against the model and the bytes
// against the shapes). Separate from the service so the fuzz target drives the same code.
// Thread-safe: pure functions.
#pragma once

#include <string>

#include "proto/anvil/v1/anvil.pb.h"
#include "proto/inference/grpc_service.pb.h"

namespace anvil::server {

struct KServeType {
  const char* kserve;          // the protocol's datatype name
  v1::DType dtype;             // Anvil's
  inference::DataType triton;  // Triton's model-configuration enum
};

// INVALID_ARGUMENT (a ServiceError) naming `what` for a datatype Anvil does not serve.
const KServeType& kserve_type_by_name(const std::string& datatype, const std::string& what);
const KServeType& kserve_type_of(v1::DType dtype);
// "latest" for an empty version.
std::string kserve_version(const std::string& v);

// The request as a PredictRequest; INVALID_ARGUMENT naming the input for contents that do not
// fit its datatype, raw and typed contents together, or a raw_input_contents count that is not
// one per input.
v1::PredictRequest predict_request_of(const inference::ModelInferRequest& req);

}  // namespace anvil::server
