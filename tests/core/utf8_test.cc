// UTF-8 validation and the U+FFFD rule: the Unicode Standard's own example of maximal subparts
// (chapter 3, Table 3-8), the boundaries of RFC 3629's well-formed byte sequences (overlongs,
// surrogates, beyond U+10FFFF, truncation), and random byte strings against Python's decoder
// (bytes.decode("utf-8", "replace") and "strict"), an implementation independent of this one.
#include "core/util/utf8.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/core/test_util.h"

namespace anvil {
namespace {

using test::Raises;
using ::testing::HasSubstr;

const std::string kFffd = "\xEF\xBF\xBD";

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int v : b) s.push_back(static_cast<char>(v));
  return s;
}

TEST(Utf8, TheStandardsExampleOfMaximalSubparts) {
  // 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a, FFFD x3, b, FFFD, c, FFFD x2, d (Table 3-8).
  const std::string in = Bytes({0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64});
  EXPECT_EQ(to_valid_utf8(in), "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_EQ(utf8_error_offset(in), 1u);
}

TEST(Utf8, WellFormedBoundariesOfRfc3629) {
  const std::vector<std::string> valid = {
      "",
      "plain ASCII",
      Bytes({0xC2, 0x80}),              // U+0080
      Bytes({0xDF, 0xBF}),              // U+07FF
      Bytes({0xE0, 0xA0, 0x80}),        // U+0800
      Bytes({0xED, 0x9F, 0xBF}),        // U+D7FF, the last before the surrogates
      Bytes({0xEE, 0x80, 0x80}),        // U+E000, the first after them
      Bytes({0xEF, 0xBF, 0xBF}),        // U+FFFF
      Bytes({0xF0, 0x90, 0x80, 0x80}),  // U+10000
      Bytes({0xF4, 0x8F, 0xBF, 0xBF}),  // U+10FFFF
      "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x94\xA5",
  };
  for (const std::string& s : valid) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
    EXPECT_EQ(to_valid_utf8(s), s);
  }
  const std::vector<std::pair<std::string, size_t>> invalid = {
      {Bytes({0x80}), 0},                       // a lone continuation byte
      {Bytes({0xC0, 0x80}), 0},                 // overlong U+0000
      {Bytes({0xC1, 0xBF}), 0},                 // overlong U+007F
      {Bytes({0xE0, 0x9F, 0xBF}), 0},           // overlong U+07FF
      {Bytes({0xED, 0xA0, 0x80}), 0},           // the surrogate U+D800
      {Bytes({0xF0, 0x8F, 0xBF, 0xBF}), 0},     // overlong U+FFFF
      {Bytes({0xF4, 0x90, 0x80, 0x80}), 0},     // U+110000
      {Bytes({0xF5, 0x80, 0x80, 0x80}), 0},     // no sequence begins with F5..FF
      {"ok" + Bytes({0xE2, 0x82}), 2},          // cut short at the end
      {"caf" + Bytes({0xE9}) + " au lait", 3},  // Latin-1's e acute
  };
  for (const auto& [s, at] : invalid) {
    EXPECT_FALSE(is_valid_utf8(s));
    EXPECT_EQ(utf8_error_offset(s), at);
    EXPECT_TRUE(is_valid_utf8(to_valid_utf8(s)));
  }
  EXPECT_EQ(to_valid_utf8("caf" + Bytes({0xE9}) + "!"), "caf" + kFffd + "!");
  EXPECT_EQ(to_valid_utf8("ok" + Bytes({0xE2, 0x82})), "ok" + kFffd);  // one subpart, one U+FFFD
}

TEST(Utf8, CheckNamesTheFieldTheOffsetAndTheBytes) {
  EXPECT_NO_THROW(check_utf8("label", "label_column"));
  const std::string msg = Raises<Error>([] { check_utf8("na" + Bytes({0xEF, 0xBF}) + "x", "CSV header, column 2"); });
  EXPECT_THAT(msg, HasSubstr("CSV header, column 2: not valid UTF-8 at byte 2 (0xEF 0xBF)"));
  EXPECT_THAT(msg, HasSubstr("expected UTF-8 text"));
}

// Random strings (biased towards the bytes that begin and continue sequences) through Python's
// decoder: the same verdict and the same replacement.
TEST(Utf8, AgreesWithPythonsDecoderOnRandomBytes) {
  std::FILE* probe = ::popen("/usr/bin/python3 -c 'print(1)' 2>/dev/null", "r");
  char buf[8] = {0};
  const bool have_python = probe != nullptr && std::fgets(buf, sizeof(buf), probe) != nullptr && buf[0] == '1';
  if (probe != nullptr) ::pclose(probe);
  if (!have_python) GTEST_SKIP() << "no /usr/bin/python3 to compare with";
  std::mt19937 rng(20261205);
  const int pool[] = {0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                      0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
  std::vector<std::string> cases;
  for (int i = 0; i < 400; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) s.push_back(static_cast<char>(pool[rng() % std::size(pool)]));
    cases.push_back(s);
  }
  // One case per line, in hex; Python answers the first invalid offset (-1: valid) and the
  // replaced text in hex.
  std::string script_in;
  for (const std::string& s : cases) {
    for (unsigned char c : s) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", c);
      script_in += hex;
    }
    script_in += "\n";
  }
  char path[] = "/tmp/anvil-utf8-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, script_in.data(), script_in.size()), static_cast<ssize_t>(script_in.size()));
  ::close(fd);
  const std::string cmd = std::string(
                              "/usr/bin/python3 -c '\n"
                              "import sys\n"
                              "for line in open(sys.argv[1]):\n"
                              "    b = bytes.fromhex(line.strip())\n"
                              "    try:\n"
                              "        b.decode(\"utf-8\"); at = -1\n"
                              "    except UnicodeDecodeError as e:\n"
                              "        at = e.start\n"
                              "    print(at, b.decode(\"utf-8\", \"replace\").encode().hex())\n"
                              "' ") +
                          path;
  std::FILE* py = ::popen(cmd.c_str(), "r");
  ASSERT_NE(py, nullptr);
  char line[512];
  size_t i = 0;
  while (std::fgets(line, sizeof(line), py) != nullptr && i < cases.size()) {
    long at = 0;
    char hex[400] = {0};
    ASSERT_GE(std::sscanf(line, "%ld %399s", &at, hex), 1);
    std::string replaced;
    for (size_t k = 0; hex[k] != '\0' && hex[k + 1] != '\0'; k += 2) {
      replaced.push_back(static_cast<char>(std::stoi(std::string(hex + k, 2), nullptr, 16)));
    }
    const size_t ours = utf8_error_offset(cases[i]);
    EXPECT_EQ(ours == std::string::npos ? -1L : static_cast<long>(ours), at) << "case " << i;
    EXPECT_EQ(to_valid_utf8(cases[i]), replaced) << "case " << i;
    ++i;
  }
  ::pclose(py);
  ::unlink(path);
  EXPECT_EQ(i, cases.size());
}

}  // namespace
}  // namespace anvil
