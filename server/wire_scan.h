// A PredictRequest's wire bytes checked before protobuf parses them. Parsing is where a small
// message turns into a large one: ~33 M empty `Tensor` entries fit in 64 MiB and take ~3 GB as
// objects; 64 M packed shape entries take 512 MB. The scan walks the wire format without
// allocating, counts tensors, dims and fields, and refuses what exceeds the limits with
// INVALID_ARGUMENT naming the limit, so parsing only ever sees a bounded message.
#pragma once

#include <google/protobuf/io/zero_copy_stream.h>

#include "server/request_limits.h"

namespace anvil::server {

// Throws ServiceError(INVALID_ARGUMENT) for malformed wire data (truncated, bad wire types,
// groups) or for more inputs, dims, fields or name bytes than `limits` allow.
void scan_predict_request(google::protobuf::io::ZeroCopyInputStream& in, const RequestLimits& limits);

}  // namespace anvil::server
