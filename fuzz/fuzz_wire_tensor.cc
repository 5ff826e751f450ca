// A PredictRequest from the wire: the count scan, then (when it passes) protobuf's parse and
// the tensor decoder, as the Serving service runs them. Errors are ServiceErrors; anything
// else (a crash, a sanitizer report, an allocation past the limits) is a finding.
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "proto/anvil/v1/anvil.pb.h"
#include "server/status.h"
#include "server/wire_scan.h"
#include "server/wire_tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::server::RequestLimits limits;
  try {
    google::protobuf::io::ArrayInputStream scan(data, static_cast<int>(size));
    anvil::server::scan_predict_request(scan, limits);
    anvil::v1::PredictRequest req;
    if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
    for (const anvil::v1::Tensor& t : req.inputs()) {
      // Decoding allocates what the shape says only after checking it against the bytes sent.
      (void)anvil::server::decode_tensor(t);
    }
  } catch (const anvil::server::ServiceError&) {
  }
  return 0;
}
