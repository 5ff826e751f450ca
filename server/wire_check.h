// A request's wire bytes checked against its message type before protobuf parses them, for
// every RPC (server/unary_call.h). Parsing is where a small message becomes a large one (an
// empty sub-message is 2 bytes on the wire and ~100 in memory; a packed varint is 1 byte and
// 8), and where protobuf's own refusal (a truncated field, a string that is not UTF-8) would
// come back as a bare INTERNAL. The walk is driven by the type's descriptor, allocates nothing
// per field, and names the field it stops at as a path: "spec.dataset.path",
// "inputs[3].name", "states (field 1)".
// Thread-safe: a pure function.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include <cstdint>
#include <string_view>

namespace anvil::server {

struct WireBounds {
  int64_t max_fields = 1 << 16;          // tags in all, nested ones included
  int64_t max_packed_varints = 1 << 20;  // elements of packed varint fields, in all
  int max_depth = 32;                    // nested messages
  // Entries of any one repeated message, string or bytes field (each an object once parsed).
  int64_t max_repeated = INT64_MAX;
};

// Throws ServiceError(INVALID_ARGUMENT) "<Type>: <path>: <what>" for malformed wire data (a bad
// tag, a truncated field, a length past its end, groups, wire types 6 and 7), a string field
// that is not valid UTF-8 (with the byte offset), nesting deeper than max_depth, or more fields
// packed varints or repeated entries than `bounds` allow. Fields the type does not know are walked as unknown.
void check_wire(const google::protobuf::Descriptor& type, std::string_view bytes, const WireBounds& bounds);
// The same over a stream of `size` bytes (a gRPC ByteBuffer's slices: nothing is flattened).
void check_wire(const google::protobuf::Descriptor& type, google::protobuf::io::ZeroCopyInputStream& stream,
                int64_t size, const WireBounds& bounds);

}  // namespace anvil::server
