// Tensors on the wire: round trips for every dtype, and each way a request can lie about its
// bytes is refused before anything is allocated.
#include "server/wire_tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/anvil.h"
#include "server/status.h"

namespace anvil::server {
namespace {

using ::testing::HasSubstr;

grpc::StatusCode CodeOf(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const ServiceError& e) {
    if (message) *message = e.what();
    return to_grpc(e.status()).error_code();  // as the client sees it
  }
  return grpc::StatusCode::OK;
}

TEST(WireTensor, RoundTripsEveryDtypeAndLayout) {
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool}) {
    SCOPED_TRACE(detail::StrCat(dt));
    const Tensor src = (arange(24, kFloat32).reshape({2, 3, 4}) - 5).to(dt);
    const Tensor strided = src.transpose(0, 2);  // not contiguous: encoded in logical order
    v1::Tensor wire;
    encode_tensor(strided, "x", &wire);
    EXPECT_EQ(wire.name(), "x");
    EXPECT_EQ(static_cast<int64_t>(wire.raw().size()), 24 * itemsize(dt));
    const Tensor back = decode_tensor(wire);
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.sizes(), strided.sizes());
    EXPECT_TRUE(equal(back, strided.contiguous()));
  }
}

TEST(WireTensor, RawBytesAreLittleEndianRowMajor) {
  v1::Tensor wire;
  encode_tensor(tensor(std::vector<int32_t>{1, 258}), "x", &wire);
  ASSERT_EQ(wire.raw().size(), 8u);
  EXPECT_EQ(static_cast<unsigned char>(wire.raw()[0]), 1);
  EXPECT_EQ(static_cast<unsigned char>(wire.raw()[4]), 2);  // 258 = 0x0102: low byte first
  EXPECT_EQ(static_cast<unsigned char>(wire.raw()[5]), 1);
}

TEST(WireTensor, ByteSizeMismatchNamesBothSizes) {
  v1::Tensor wire;
  wire.set_name("input");
  wire.set_dtype(v1::FLOAT32);
  wire.add_shape(2);
  wire.add_shape(64);
  wire.set_raw(std::string(2 * 64 * 4 - 1, '\0'));
  std::string msg;
  EXPECT_EQ(CodeOf([&] { decode_tensor(wire); }, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("needs 512 bytes"));
  EXPECT_THAT(msg, HasSubstr("got 511"));
}

TEST(WireTensor, ShapeProductOverflowIsRefusedWithoutAllocating) {
  v1::Tensor wire;
  wire.set_dtype(v1::FLOAT32);
  for (int i = 0; i < 4; ++i) wire.add_shape(int64_t{1} << 20);  // 2^80 elements
  wire.set_raw("abcd");
  std::string msg;
  EXPECT_EQ(CodeOf([&] { decode_tensor(wire); }, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("more elements than fit"));
  // Elements that fit in int64 but whose byte count does not.
  v1::Tensor wide;
  wide.set_dtype(v1::FLOAT64);
  wide.add_shape(std::numeric_limits<int64_t>::max() / 4);
  EXPECT_EQ(CodeOf([&] { decode_tensor(wide); }), grpc::StatusCode::INVALID_ARGUMENT);
}

// Found by the wire-tensor fuzzer: zero elements (a zero dim) but strides that overflow int64.
TEST(WireTensor, AZeroDimWithHugeOtherDimsIsInvalidArgument) {
  v1::Tensor wire;
  wire.set_dtype(v1::FLOAT32);
  wire.add_shape(0);
  wire.add_shape(int64_t{1} << 40);
  wire.add_shape(int64_t{1} << 40);
  std::string msg;
  EXPECT_EQ(CodeOf([&] { decode_tensor(wire); }, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("strides overflow"));
}

TEST(WireTensor, NegativeDimsAndUnknownDtypesAreRefused) {
  v1::Tensor wire;
  wire.set_dtype(v1::FLOAT32);
  wire.add_shape(-1);
  std::string msg;
  EXPECT_EQ(CodeOf([&] { decode_tensor(wire); }, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("non-negative"));
  v1::Tensor unspecified;
  unspecified.add_shape(1);
  EXPECT_EQ(CodeOf([&] { decode_tensor(unspecified); }, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("DTYPE_UNSPECIFIED"));
}

TEST(WireTensor, EmptyTensorsDecode) {
  v1::Tensor wire;
  wire.set_dtype(v1::FLOAT32);
  wire.add_shape(0);
  wire.add_shape(5);
  const Tensor t = decode_tensor(wire);
  EXPECT_EQ(t.sizes(), (IntArray{0, 5}));
}

}  // namespace
}  // namespace anvil::server
