#include "server/wire_check.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <string>
#include <unordered_map>

#include "core/util/utf8.h"
#include "server/status.h"

namespace anvil::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;

constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

class Walker {
 public:
  Walker(const Descriptor& root, google::protobuf::io::ZeroCopyInputStream& stream, int64_t size,
         const WireBounds& bounds)
      : root_(root), in_(&stream), bounds_(bounds) {
    // The request's end as a limit (not the total-bytes limit, whose end protobuf does not
    // count as a message's legitimate end).
    (void)in_.PushLimit(static_cast<int>(std::min<int64_t>(size, INT32_MAX)));
  }

  void run() { message(&root_, "", 0); }

 private:
  [[noreturn]] void Fail(const std::string& path, const std::string& what) {
    throw ServiceError(
        absl::StatusCode::kInvalidArgument,
        detail::StrCat(root_.name(), ": ", path.empty() ? "" : path + ": ", what, "; expected an ", root_.full_name()));
  }

  // Walks fields until the current limit; `type` is null for an unknown sub-message.
  void message(const Descriptor* type, const std::string& path, int depth) {
    if (depth > bounds_.max_depth) Fail(path, detail::StrCat("nested deeper than ", bounds_.max_depth, " messages"));
    std::unordered_map<int, int> seen;  // entries of each repeated field so far, for the path
    while (true) {
      const uint32_t tag = in_.ReadTag();
      if (tag == 0) {
        // 0 is also what a tag that is not one reads as (field number 0, an overlong varint).
        if (!in_.ConsumedEntireMessage()) Fail(path, "malformed wire data (a bad tag)");
        return;
      }
      if (++fields_ > bounds_.max_fields) {
        Fail(path, detail::StrCat("more than ", bounds_.max_fields, " fields in one request"));
      }
      const int number = static_cast<int>(tag >> 3);
      const uint32_t wire = tag & 7;
      const FieldDescriptor* field = type == nullptr ? nullptr : type->FindFieldByNumber(number);
      std::string at = path.empty() ? "" : path + ".";
      at += field == nullptr ? detail::StrCat("field ", number) : field->name();
      if (field != nullptr && field->is_repeated()) {
        const int index = seen[number]++;
        at += detail::StrCat("[", index, "]");
        if (index >= bounds_.max_repeated && wire == kLengthDelimited &&
            (field->type() == FieldDescriptor::TYPE_MESSAGE || field->type() == FieldDescriptor::TYPE_STRING ||
             field->type() == FieldDescriptor::TYPE_BYTES)) {
          Fail(at, detail::StrCat("expected at most ", bounds_.max_repeated, " entries, got more"));
        }
      }
      switch (wire) {
        case kVarint: {
          uint64_t v;
          if (!in_.ReadVarint64(&v)) Fail(at, "malformed wire data (a truncated varint)");
          break;
        }
        case kFixed64:
          if (!in_.Skip(8)) Fail(at, "malformed wire data (a truncated fixed64)");
          break;
        case kFixed32:
          if (!in_.Skip(4)) Fail(at, "malformed wire data (a truncated fixed32)");
          break;
        case kLengthDelimited:
          length_delimited(field, at, depth);
          break;
        default:
          Fail(at, detail::StrCat("malformed wire data (wire type ", wire, ": groups and types 6-7 are not accepted)"));
      }
    }
  }

  void length_delimited(const FieldDescriptor* field, const std::string& at, int depth) {
    uint32_t length;
    if (!in_.ReadVarint32(&length) || static_cast<int64_t>(length) > Remaining()) {
      Fail(at, "malformed wire data (a length past the end of the message)");
    }
    const int n = static_cast<int>(length);
    if (field == nullptr) {
      in_.Skip(n);
      return;
    }
    switch (field->type()) {
      case FieldDescriptor::TYPE_STRING: {
        // Read out (the stream's chunks need not be contiguous); text fields are names and
        // specs, bounded by the message's size like everything else.
        std::string text;
        if (!in_.ReadString(&text, n)) Fail(at, "malformed wire data (a truncated string)");
        if (!is_valid_utf8(text)) {
          try {
            check_utf8(text, at);
          } catch (const Error& e) {
            throw ServiceError(absl::StatusCode::kInvalidArgument,
                               detail::StrCat(root_.name(), ": ", e.what(), "; expected an ", root_.full_name()));
          }
        }
        return;
      }
      case FieldDescriptor::TYPE_MESSAGE: {
        const CodedInputStream::Limit outer = in_.PushLimit(n);
        message(field->message_type(), at, depth + 1);
        in_.PopLimit(outer);
        return;
      }
      case FieldDescriptor::TYPE_BYTES:
        in_.Skip(n);
        return;
      default:
        break;
    }
    // A packed repeated scalar.
    const CodedInputStream::Limit outer = in_.PushLimit(n);
    switch (FieldDescriptor::TypeToCppType(field->type())) {
      case FieldDescriptor::CPPTYPE_FLOAT:
      case FieldDescriptor::CPPTYPE_DOUBLE:
        in_.Skip(n);  // fixed-size: as large in memory as on the wire
        break;
      default:
        if (field->type() == FieldDescriptor::TYPE_FIXED32 || field->type() == FieldDescriptor::TYPE_SFIXED32 ||
            field->type() == FieldDescriptor::TYPE_FIXED64 || field->type() == FieldDescriptor::TYPE_SFIXED64) {
          in_.Skip(n);
          break;
        }
        while (in_.BytesUntilLimit() > 0) {
          uint64_t v;
          if (!in_.ReadVarint64(&v)) Fail(at, "malformed wire data (a truncated packed varint)");
          if (++packed_ > bounds_.max_packed_varints) {
            Fail(at, detail::StrCat("more than ", bounds_.max_packed_varints,
                                    " packed integers in one request (send large tensors as raw bytes)"));
          }
        }
    }
    in_.PopLimit(outer);
  }

  // Bytes left in the current message (its pushed limit; the request's at the top).
  int64_t Remaining() { return in_.BytesUntilLimit(); }

  const Descriptor& root_;
  CodedInputStream in_;
  const WireBounds& bounds_;
  int64_t fields_ = 0;
  int64_t packed_ = 0;
};

}  // namespace

void check_wire(const Descriptor& type, std::string_view bytes, const WireBounds& bounds) {
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  check_wire(type, stream, static_cast<int64_t>(bytes.size()), bounds);
}

void check_wire(const Descriptor& type, google::protobuf::io::ZeroCopyInputStream& stream, int64_t size,
                const WireBounds& bounds) {
  Walker(type, stream, size, bounds).run();
}

}  // namespace anvil::server
