#include "server/unary_call.h"

#include <grpcpp/impl/codegen/proto_buffer_reader.h>

#include <vector>

#include "server/status.h"

namespace anvil::server {

grpc::Status parse_request(const grpc::ByteBuffer& request, google::protobuf::Message* out, const CallLimits& limits) {
  const std::string& type = out->GetDescriptor()->name();
  const auto size = static_cast<int64_t>(request.Length());
  if (size > limits.max_bytes) {
    return to_grpc(absl::ResourceExhaustedError(absl::StrCat(type, ": ", size, " bytes; the ", limits.service,
                                                             " service takes at most ", limits.max_bytes, " (anvild ",
                                                             limits.flag, ")")));
  }
  // The walk and the parse read the buffer's slices in place (ByteBuffer copies share them).
  try {
    grpc::ByteBuffer walked(request);
    grpc::ProtoBufferReader reader(&walked);
    check_wire(*out->GetDescriptor(), reader, size, limits.wire);
  } catch (const ServiceError& e) {
    return to_grpc(e.status());
  }
  grpc::ByteBuffer parsed(request);
  grpc::ProtoBufferReader reader(&parsed);
  if (!out->ParseFromZeroCopyStream(&reader)) {
    return to_grpc(absl::InvalidArgumentError(
        absl::StrCat(type, ": malformed wire data; expected an ", out->GetDescriptor()->full_name())));
  }
  return grpc::Status::OK;
}

grpc::Status serialize_response(const google::protobuf::Message& message, grpc::ByteBuffer* response) {
  bool own_buffer = false;
  return grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(message, response, &own_buffer);
}

absl::Status pool_full_status(const char* calls, const BoundedExecutor& pool) {
  return absl::ResourceExhaustedError(absl::StrCat("too many ", calls, " at once (", pool.max_threads(),
                                                   " running and ", pool.max_queue(), " queued); retry with backoff"));
}

grpc::Status pool_full(const char* calls, const BoundedExecutor& pool) {
  return to_grpc(pool_full_status(calls, pool));
}

}  // namespace anvil::server
