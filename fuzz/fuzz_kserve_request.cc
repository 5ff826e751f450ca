// A KServe ModelInferRequest from the wire, as the KServe service takes it: the wire check
// with the service's bounds (entries per repeated field, fields, packed integers, UTF-8), then
// protobuf's parse, the conversion to a PredictRequest and the tensor decoder. Errors are
// ServiceErrors; anything else (a crash, a sanitizer report, an allocation past the limits) is
// a finding.
#include "proto/inference/grpc_service.pb.h"
#include "server/kserve_wire.h"
#include "server/request_limits.h"
#include "server/status.h"
#include "server/wire_check.h"
#include "server/wire_tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const anvil::server::RequestLimits limits;
  anvil::server::WireBounds bounds;
  bounds.max_fields = limits.max_wire_fields;
  bounds.max_repeated = std::max(64, limits.max_predict_inputs);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    anvil::server::check_wire(*inference::ModelInferRequest::descriptor(), bytes, bounds);
    inference::ModelInferRequest req;
    if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
    const anvil::v1::PredictRequest p = anvil::server::predict_request_of(req);
    for (const anvil::v1::Tensor& t : p.inputs()) (void)anvil::server::decode_tensor(t);
  } catch (const anvil::server::ServiceError&) {
  }
  return 0;
}
