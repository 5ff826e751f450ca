// The insecure default's test of an address: literal loopback IPs, names by every address they
// resolve to, never a prefix of the text.
#include "server/loopback.h"

#include <gtest/gtest.h>

namespace anvil::server {
namespace {

TEST(Loopback, LiteralAddressesAreJudgedByTheirValue) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1:50051"));
  EXPECT_TRUE(is_loopback_address("127.1.2.3:1"));
  EXPECT_TRUE(is_loopback_address("[::1]:50051"));
  EXPECT_TRUE(is_loopback_address("ipv4:127.0.0.1:50051"));
  EXPECT_TRUE(is_loopback_address("ipv6:[::1]:50051"));
  EXPECT_TRUE(is_loopback_address("[::ffff:127.0.0.1]:1"));
  EXPECT_FALSE(is_loopback_address("0.0.0.0:50051"));
  EXPECT_FALSE(is_loopback_address("[::]:50051"));
  EXPECT_FALSE(is_loopback_address("10.1.2.3:50051"));
  EXPECT_FALSE(is_loopback_address("128.0.0.1:50051"));
  EXPECT_FALSE(is_loopback_address(":50051"));     // every interface
  EXPECT_FALSE(is_loopback_address("127.0.0.1"));  // no port: not an address gRPC binds
}

TEST(Loopback, NamesAreJudgedByWhatTheyResolveTo) {
  // The probe's case: a name that merely starts with "127." is a name (it resolves to whatever
  // its DNS says, here to nothing) and never gets the insecure default.
  EXPECT_FALSE(is_loopback_address("127.example.com:50051"));
  EXPECT_FALSE(is_loopback_address("127.0.0.1.nip.io.invalid:50051"));
  EXPECT_FALSE(is_loopback_address("no-such-host.invalid:50051"));
  EXPECT_TRUE(is_loopback_address("localhost:50051"));  // /etc/hosts: 127.0.0.1 (and ::1)
}

TEST(Loopback, UnixSocketsAreLocal) {
  EXPECT_TRUE(is_loopback_address("unix:/run/anvil.sock"));
  EXPECT_TRUE(is_loopback_address("unix-abstract:anvil"));
}

}  // namespace
}  // namespace anvil::server
