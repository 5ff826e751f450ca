// safetensors: round trips for every dtype, the header layout the format specifies (checked
// byte by byte here, independently of the reader), corrupt and truncated files, and
// interoperability with the reference Python implementation when it is installed.
#include "core/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/anvil.h"
#include "core/util/file.h"
#include "tests/core/test_util.h"
#include "tests/paths.h"

namespace anvil::io {
namespace {

using test::ErrorOf;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(Safetensors, RoundTripsEveryDtypeWithMetadata) {
  NamedTensors in;
  for (ScalarType dt : {kFloat64, kFloat32, kFloat16, kBFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool}) {
    in.emplace_back(std::string("t_") + safetensors_dtype_name(dt), (randn({3, 2}) * 10.0).to(dt));
  }
  in.emplace_back("empty", zeros({0, 4}));
  in.emplace_back("scalar", scalar_tensor(2.5, kFloat64));
  in.emplace_back("strided", randn({4, 5}).t());  // written contiguous
  const std::string path = TempPath("round.safetensors");
  save_safetensors(path, in, {{"format", "pt"}, {"note", "hello"}});
  const Safetensors out = load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    EXPECT_EQ(out.tensors[i].second.dtype(), in[i].second.dtype());
    EXPECT_TRUE(equal(out.tensors[i].second, in[i].second)) << in[i].first;
  }
  EXPECT_EQ(out.metadata.at("note"), "hello");
}

TEST(Safetensors, LayoutFollowsTheSpecification) {
  const std::string bytes = serialize_safetensors({{"w", tensor({1.0f, 2.0f})}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_THAT(header, HasSubstr(R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"));
  ASSERT_EQ(bytes.size(), 8 + n + 8);
  float values[2];
  std::memcpy(values, bytes.data() + 8 + n, 8);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], 2.0f);
}

TEST(Safetensors, CorruptFilesAreReportedNotLoaded) {
  const std::string good = serialize_safetensors({{"w", randn({4, 4})}, {"b", randn({4})}});
  EXPECT_THAT(ErrorOf([&] { parse_safetensors(good.substr(0, 5), "x"); }), HasSubstr("fewer than the 8-byte"));
  EXPECT_THAT(ErrorOf([&] { parse_safetensors(good.substr(0, good.size() - 3), "x"); }), HasSubstr("truncated file?"));
  std::string huge = good;
  huge[7] = 0x7f;  // header length far beyond the file
  EXPECT_THAT(ErrorOf([&] { parse_safetensors(huge, "x"); }), HasSubstr("header length says"));
  std::string bad_json = good;
  bad_json[9] = '!';
  EXPECT_THAT(ErrorOf([&] { parse_safetensors(bad_json, "x"); }), HasSubstr("not valid JSON"));
  std::string wrong_dtype = good;
  const auto pos = wrong_dtype.find("F32");
  wrong_dtype.replace(pos, 3, "F99");
  EXPECT_THAT(ErrorOf([&] { parse_safetensors(wrong_dtype, "model.safetensors"); }),
              HasSubstr("model.safetensors: tensor 'w': unsupported dtype 'F99'"));
  std::string wrong_shape = good;
  wrong_shape.replace(wrong_shape.find("[4,4]"), 5, "[4,5]");
  EXPECT_THAT(ErrorOf([&] { parse_safetensors(wrong_shape, "x"); }), HasSubstr("need 80"));
  // Fields of the wrong JSON type are errors naming the field, not exceptions of the JSON library.
  auto with_header = [](const std::string& json) {
    std::string file(8, '\0');
    const uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return file + json;
  };
  EXPECT_THAT(ErrorOf([&] {
                parse_safetensors(with_header(R"({"a": {"dtype": [3], "shape": [1], "data_offsets": [0, 4]}})"), "x");
              }),
              HasSubstr("tensor 'a': dtype must be a string"));
  EXPECT_THAT(ErrorOf([&] {
                parse_safetensors(with_header(R"({"a": {"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}})"), "x");
              }),
              HasSubstr("tensor 'a': shape must be an array"));
  EXPECT_THAT(ErrorOf([] { load_safetensors("/nonexistent/dir/m.safetensors"); }), HasSubstr("cannot open"));
}

TEST(Safetensors, AtomicWriteLeavesNoTemporaryAndKeepsOldFileOnFailure) {
  const std::string dir = TempPath("atomic");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/m.safetensors";
  save_safetensors(path, {{"a", ones({2})}});
  EXPECT_THROW(save_safetensors(path, {{"a", ones({2})}, {"a", ones({2})}}), Error);  // duplicate name
  EXPECT_TRUE(equal(load_safetensors(path).tensors[0].second, ones({2})));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

// Interoperability with the reference implementation (Python safetensors + numpy), when the
// test environment has them (`make test` installs them into .venv; skipped otherwise).
TEST(Safetensors, InteroperatesWithTheReferenceImplementation) {
  const std::string python = anvil::test::PeerPython();
  if (!std::filesystem::exists(python) ||
      std::system((python + " -c 'import safetensors.numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no Python with safetensors at " << python;
  }
  const std::string ours = TempPath("ours.safetensors"), theirs = TempPath("theirs.safetensors");
  Tensor w = randn({3, 4});
  Tensor idx = tensor(std::vector<int64_t>{5, -2, 7});
  save_safetensors(ours, {{"w", w}, {"idx", idx}});
  const std::string script = TempPath("interop.py");
  std::ofstream(script)
      << "import sys, numpy as np\n"
         "from safetensors.numpy import load_file, save_file\n"
         "t = load_file(sys.argv[1])\n"
         "assert t['w'].dtype == np.float32 and t['w'].shape == (3, 4)\n"
         "assert t['idx'].tolist() == [5, -2, 7]\n"
         "save_file({'w2': t['w'] * 2, 'h': np.arange(6, dtype=np.float16).reshape(2, 3)}, sys.argv[2])\n";
  ASSERT_EQ(std::system((python + " " + script + " " + ours + " " + theirs).c_str()), 0);
  const Safetensors back = load_safetensors(theirs);
  EXPECT_TRUE(equal(*back.find("w2"), w * 2.0));
  EXPECT_TRUE(equal(back.find("h")->to(kFloat32), arange(6, kFloat32).reshape({2, 3})));
}

}  // namespace
}  // namespace anvil::io
