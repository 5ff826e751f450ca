// SHA-256: the example messages of FIPS 180-4 (digests as published by NIST and as printed by
// coreutils' sha256sum), messages around the padding boundaries, independence from how the
// input is split across update() calls, and hashing files.
#include "core/util/sha256.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include "core/util/error.h"
#include "core/util/file.h"
#include "tests/core/test_util.h"

namespace anvil {
namespace {

using test::Raises;
using ::testing::HasSubstr;

TEST(Sha256, FipsExampleMessages) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopq"
                       "rsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// 55 bytes is the longest message whose padding fits its last block; 56..63 need one more
// block; 64 fills a block exactly. Reference digests from `head -c N /dev/zero | tr '\0' a | sha256sum`.
TEST(Sha256, MessagesAroundThePaddingBoundary) {
  const std::pair<size_t, const char*> cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
  };
  for (const auto& [n, want] : cases) EXPECT_EQ(sha256_hex(std::string(n, 'a')), want) << n << " bytes";
}

TEST(Sha256, DigestBytesMatchTheHexForm) {
  Sha256 hash;
  hash.update("abc");
  const std::array<uint8_t, 32> d = hash.digest();
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[1], 0x78);
  EXPECT_EQ(d[31], 0xad);
}

TEST(Sha256, AnySplitOfTheInputGivesTheSameDigest) {
  std::mt19937_64 rng(1234);
  std::string data(10 * 1024, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const std::string whole = sha256_hex(data);
  for (int trial = 0; trial < 50; ++trial) {
    Sha256 hash;
    size_t pos = 0;
    while (pos < data.size()) {
      // Mostly short pieces, so that pieces straddle block boundaries in every way.
      const size_t max_piece = trial % 2 == 0 ? 70 : 3000;
      const size_t n = std::min(data.size() - pos, std::uniform_int_distribution<size_t>(0, max_piece)(rng));
      hash.update(data.data() + pos, n);
      pos += n;
    }
    EXPECT_EQ(hash.hex_digest(), whole) << "trial " << trial;
  }
  Sha256 bytewise;
  for (char c : data) bytewise.update(&c, 1);
  EXPECT_EQ(bytewise.hex_digest(), whole);
}

TEST(Sha256, FinishedHashRefusesMoreInput) {
  Sha256 hash;
  hash.update("abc");
  hash.digest();
  EXPECT_THAT(Raises<Error>([&] { hash.update("d"); }), HasSubstr("digest() was already taken"));
  EXPECT_THAT(Raises<Error>([&] { hash.digest(); }), HasSubstr("digest() was already taken"));
}

TEST(Sha256, FileDigestEqualsDigestOfItsContent) {
  // Larger than one 1 MiB read chunk and not a multiple of it, so the file is read in pieces.
  std::mt19937 rng(99);
  std::string content(size_t{1} << 20, '\0');
  for (char& c : content) c = static_cast<char>(rng());
  content += "tail that crosses the chunk boundary";
  const std::string path = ::testing::TempDir() + "/sha256_test_" + std::to_string(getpid()) + ".bin";
  write_file_atomic(path, content);
  EXPECT_EQ(sha256_file_hex(path), sha256_hex(content));
  write_file_atomic(path, "abc");
  EXPECT_EQ(sha256_file_hex(path), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::remove(path.c_str());
}

TEST(Sha256, MissingFileErrorNamesThePath) {
  const std::string path = ::testing::TempDir() + "/no_such_dir_for_sha256/missing.bin";
  const std::string msg = Raises<Error>([&] { sha256_file_hex(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));
}

}  // namespace
}  // namespace anvil
