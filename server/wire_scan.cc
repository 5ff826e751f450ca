#include "server/wire_scan.h"

#include <google/protobuf/io/coded_stream.h>

#include "server/status.h"

namespace anvil::server {
namespace {

using google::protobuf::io::CodedInputStream;

// Wire types (protobuf encoding).
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// PredictRequest and Tensor field numbers (proto/anvil/v1/anvil.proto).
constexpr uint32_t kRequestModel = 1, kRequestVersion = 2, kRequestInputs = 3;
constexpr uint32_t kTensorName = 1, kTensorShape = 3;

[[noreturn]] void Malformed(const char* where) {
  throw ServiceError(absl::StatusCode::kInvalidArgument, detail::StrCat("PredictRequest: malformed wire data (", where,
                                                                        "); expected an anvil.v1.PredictRequest"));
}

class Scanner {
 public:
  Scanner(CodedInputStream& in, const RequestLimits& limits) : in_(in), limits_(limits) {}

  void request() {
    int inputs = 0;
    while (const uint32_t tag = in_.ReadTag()) {
      const uint32_t field = tag >> 3, type = tag & 7;
      count_field();
      if (type == kLengthDelimited && field == kRequestInputs) {
        ANVIL_SERVICE_CHECK(++inputs <= limits_.max_predict_inputs, absl::StatusCode::kInvalidArgument,
                            "inputs: expected at most ", limits_.max_predict_inputs, " tensors, got more");
        nested([&] { tensor(inputs - 1); });
      } else if (type == kLengthDelimited && (field == kRequestModel || field == kRequestVersion)) {
        name(field == kRequestModel ? "model" : "version");
      } else {
        skip(type);
      }
    }
    if (!in_.ConsumedEntireMessage()) Malformed("a bad tag or a truncated field");
  }

 private:
  void tensor(int index) {
    int64_t dims = 0;
    while (const uint32_t tag = in_.ReadTag()) {
      const uint32_t field = tag >> 3, type = tag & 7;
      count_field();
      if (field == kTensorShape && type == kVarint) {  // one unpacked entry
        uint64_t v;
        if (!in_.ReadVarint64(&v)) Malformed("a truncated shape entry");
        check_dims(index, ++dims);
      } else if (field == kTensorShape && type == kLengthDelimited) {  // packed entries
        nested([&] {
          uint64_t v;
          while (in_.BytesUntilLimit() > 0) {
            if (!in_.ReadVarint64(&v)) Malformed("a truncated packed shape");
            check_dims(index, ++dims);
          }
        });
      } else if (field == kTensorName && type == kLengthDelimited) {
        name("inputs[].name");
      } else {
        skip(type);
      }
    }
    if (!in_.ConsumedEntireMessage()) Malformed("a bad tag inside a tensor");
  }

  void check_dims(int index, int64_t dims) {
    ANVIL_SERVICE_CHECK(dims <= limits_.max_tensor_dims, absl::StatusCode::kInvalidArgument, "inputs[", index,
                        "].shape: expected at most ", limits_.max_tensor_dims, " dims, got more");
  }

  void count_field() {
    ANVIL_SERVICE_CHECK(++fields_ <= limits_.max_wire_fields, absl::StatusCode::kInvalidArgument,
                        "PredictRequest: expected at most ", limits_.max_wire_fields, " fields, got more");
  }

  void name(const char* what) {
    uint32_t length;
    if (!in_.ReadVarint32(&length)) Malformed("a truncated length");
    ANVIL_SERVICE_CHECK(length <= limits_.max_name_bytes, absl::StatusCode::kInvalidArgument, what,
                        ": expected at most ", limits_.max_name_bytes, " bytes, got ", length);
    if (!in_.Skip(static_cast<int>(length))) Malformed("a truncated string");
  }

  // Runs `body` inside the length-delimited field whose length comes next.
  template <typename F>
  void nested(F&& body) {
    uint32_t length;
    if (!in_.ReadVarint32(&length) || static_cast<int64_t>(length) > in_.BytesUntilTotalBytesLimit()) {
      Malformed("a length past the end of the message");
    }
    const CodedInputStream::Limit outer = in_.PushLimit(static_cast<int>(length));
    body();
    if (in_.BytesUntilLimit() != 0) Malformed("a nested field ends early");
    in_.PopLimit(outer);
  }

  void skip(uint32_t type) {
    uint64_t v;
    uint32_t length;
    switch (type) {
      case kVarint:
        if (!in_.ReadVarint64(&v)) Malformed("a truncated varint");
        return;
      case kFixed64:
        if (!in_.Skip(8)) Malformed("a truncated fixed64");
        return;
      case kFixed32:
        if (!in_.Skip(4)) Malformed("a truncated fixed32");
        return;
      case kLengthDelimited:
        if (!in_.ReadVarint32(&length) || !in_.Skip(static_cast<int>(length))) Malformed("a truncated field");
        return;
      default:  // groups (3, 4) and the unused wire types 6, 7: no field of the schema has them
        Malformed("an unsupported wire type");
    }
  }

  CodedInputStream& in_;
  const RequestLimits& limits_;
  int64_t fields_ = 0;
};

}  // namespace

void scan_predict_request(google::protobuf::io::ZeroCopyInputStream& stream, const RequestLimits& limits) {
  CodedInputStream in(&stream);
  // The whole message may be as large as the receive limit (protobuf's default cap is 2 GiB).
  in.SetTotalBytesLimit(static_cast<int>(std::min<int64_t>(limits.predict_message_bytes, INT32_MAX)));
  Scanner(in, limits).request();
}

}  // namespace anvil::server
