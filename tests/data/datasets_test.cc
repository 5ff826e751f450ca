// Dataset file formats: CSV/TSV tables, IDX (MNIST) files, image folders, the digits data
// set and the synthetic generators. Files are written into a fresh folder under
// ::testing::TempDir(); expected values come from the format specifications (IDX bytes
// written by hand, pixels written then decoded) or are recomputed independently in the test
// (the digits file is re-read with zlib directly).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/data/datasets/csv.h"
#include "core/data/datasets/digits.h"
#include "core/data/datasets/idx.h"
#include "core/data/datasets/image_folder.h"
#include "core/data/datasets/synthetic.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "tests/core/test_util.h"
#include "tests/paths.h"

using namespace anvil::data;
using namespace anvil::test;
using anvil::Tensor;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

namespace {

// A fresh, empty folder per test, removed afterwards.
class TempFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("anvil_datasets_" + std::string(info->test_suite_name()) + "_" +
                                             info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::string path = Path(name);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string WriteGz(const std::string& name, const std::string& content) const {
    const std::string path = Path(name);
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())), static_cast<int>(content.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }
  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------
// CSV

using CsvDatasetTest = TempFolderTest;

TEST_F(CsvDatasetTest, HeaderAutoDetectedAndLastColumnIsTheClass) {
  const std::string path = Write("t.csv", "a,b,label\n1,2,0\n3.5,-4e1,2\n");
  CsvDataset ds(path);
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.num_features(), 2);
  EXPECT_THAT(ds.feature_names(), ElementsAre("a", "b"));
  EXPECT_EQ(ds.target_name(), "label");
  EXPECT_TRUE(ds.is_classification());
  EXPECT_TRUE(ds.classes().empty());  // integer labels are their own class indices
  EXPECT_EQ(ds.num_classes(), 3);
  EXPECT_EQ(ds.features().dtype(), anvil::kFloat32);
  EXPECT_THAT(Vals(ds.features()), ElementsAre(1, 2, 3.5, -40));

  const Example ex = ds.get(1);
  const Tensor& x = ex[Example::kInput];
  const Tensor& y = ex[Example::kTarget];
  EXPECT_EQ(x.dtype(), anvil::kFloat32);
  EXPECT_EQ(x.sizes(), (anvil::IntArray{2}));
  EXPECT_THAT(Vals(x), ElementsAre(3.5, -40));
  EXPECT_EQ(y.dtype(), anvil::kInt64);
  EXPECT_EQ(y.dim(), 0);
  EXPECT_EQ(y.item<int64_t>(), 2);
  EXPECT_TRUE(x.is_alias_of(ds.features()));  // a view of the loaded table, not a copy
  EXPECT_THAT(ds.name(), HasSubstr("2 samples"));
  Raises<anvil::IndexError>([&] { ds.get(2); });
}

TEST_F(CsvDatasetTest, StringClassesWithoutHeaderAreDataInSortedNameOrder) {
  // Every row has a non-numeric field, so no row looks like a header.
  const std::string path = Write("iris.csv", "5.1,3.5,setosa\n4.9,3.0,virginica\n6.0,2.2,versicolor\n5.0,3.6,setosa\n");
  CsvDataset ds(path);
  ASSERT_EQ(ds.size(), 4);
  EXPECT_THAT(ds.classes(), ElementsAre("setosa", "versicolor", "virginica"));
  EXPECT_EQ(ds.num_classes(), 3);
  EXPECT_THAT(Vals(ds.targets()), ElementsAre(0, 2, 1, 0));
  EXPECT_THAT(ds.feature_names(), ElementsAre("column 1", "column 2"));
}

TEST_F(CsvDatasetTest, StringClassesWithHeader) {
  const std::string path = Write("iris.csv", "sl,sw,species\n5.1,3.5,setosa\n6.0,2.2,versicolor\n");
  CsvDataset ds(path);
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.target_name(), "species");
  EXPECT_THAT(ds.classes(), ElementsAre("setosa", "versicolor"));
}

TEST_F(CsvDatasetTest, LabelColumnByNameOrIndex) {
  const std::string path = Write("t.csv", "id,x,y,z\n10,11,1,13\n20,21,0,23\n");
  CsvOptions by_name;
  by_name.label_column = std::string("y");
  CsvDataset a(path, by_name);
  EXPECT_THAT(a.feature_names(), ElementsAre("id", "x", "z"));
  EXPECT_THAT(Vals(a.features()), ElementsAre(10, 11, 13, 20, 21, 23));
  EXPECT_THAT(Vals(a.targets()), ElementsAre(1, 0));

  CsvOptions by_index;
  by_index.label_column = int64_t{2};
  EXPECT_TRUE(CsvDataset(path, by_index).features().equal(a.features()));
  CsvOptions from_end;
  from_end.label_column = int64_t{-2};
  EXPECT_TRUE(CsvDataset(path, from_end).targets().equal(a.targets()));
  CsvOptions first;
  first.label_column = int64_t{0};
  CsvDataset c(path, first);
  EXPECT_THAT(Vals(c.targets()), ElementsAre(10, 20));
  EXPECT_EQ(c.target_name(), "id");

  CsvOptions bad_name;
  bad_name.label_column = std::string("w");
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(path, bad_name); }),
              AllOf(HasSubstr("t.csv:1: label_column: no column named 'w'"), HasSubstr("'id', 'x', 'y', 'z'")));
  CsvOptions bad_index;
  bad_index.label_column = int64_t{4};
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(path, bad_index); }),
              HasSubstr("label_column 4 is out of range for 4 columns"));
}

TEST_F(CsvDatasetTest, RegressionTargets) {
  const std::string path = Write("r.csv", "x,y\n1,0.5\n2,-1.25\n3,4\n");
  CsvDataset ds(path);
  EXPECT_FALSE(ds.is_classification());
  const Tensor y = ds.get(1)[Example::kTarget];
  EXPECT_EQ(y.dtype(), anvil::kFloat32);
  EXPECT_EQ(y.dim(), 0);
  EXPECT_EQ(y.item<float>(), -1.25f);

  // Integer-valued targets are classes unless regression is asked for.
  const std::string ints = Write("i.csv", "x,y\n1,5\n2,7\n");
  EXPECT_TRUE(CsvDataset(ints).is_classification());
  CsvOptions reg;
  reg.target = CsvOptions::Target::kRegression;
  CsvDataset r(ints, reg);
  EXPECT_EQ(r.targets().dtype(), anvil::kFloat32);
  EXPECT_THAT(Vals(r.targets()), ElementsAre(5, 7));

  CsvOptions cls;
  cls.target = CsvOptions::Target::kClass;
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(path, cls); }),
              HasSubstr("r.csv:2:2: expected an integer class label, got '0.5'"));
  const std::string names = Write("n.csv", "x,y\n1,cat\n");
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(names, reg); }),
              HasSubstr("n.csv:2:2: expected a number, got 'cat'"));
  const std::string negative = Write("neg.csv", "x,y\n1,-1\n2,1\n");
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(negative, cls); }),
              HasSubstr("neg.csv:2:2: class labels must be >= 0, got '-1'"));
  EXPECT_THAT(Vals(CsvDataset(negative, reg).targets()), ElementsAre(-1, 1));
}

TEST_F(CsvDatasetTest, TsvQuotingCrlfAndTrailingBlankLines) {
  const std::string tsv =
      Write("t.TSV", "\xEF\xBB\xBF\"f 1\"\tf2\tkind\r\n 1.5 \t\"2\"\t\"a \"\"b\"\"\"\r\n3\t4\tc\r\n\r\n\n  \n");
  CsvDataset ds(tsv);
  ASSERT_EQ(ds.size(), 2);
  EXPECT_THAT(ds.feature_names(), ElementsAre("f 1", "f2"));
  EXPECT_THAT(Vals(ds.features()), ElementsAre(1.5, 2, 3, 4));
  EXPECT_THAT(ds.classes(), ElementsAre("a \"b\"", "c"));

  // A quoted field may hold the delimiter.
  const std::string csv = Write("q.csv", "x,name\n1,\"a, b\"\n2,c\n");
  EXPECT_THAT(CsvDataset(csv).classes(), ElementsAre("a, b", "c"));

  // An explicit delimiter overrides the extension.
  const std::string semi = Write("s.csv", "x;y\n1;2\n");
  CsvOptions opts;
  opts.delimiter = ';';
  EXPECT_THAT(Vals(CsvDataset(semi, opts).features()), ElementsAre(1));
}

TEST_F(CsvDatasetTest, ReadsGzipCompressedFiles) {
  const std::string path = WriteGz("t.tsv.gz", "a\tb\n1\t0\n2\t1\n");
  CsvDataset ds(path);  // tab-separated: the name's .tsv counts before .gz
  EXPECT_THAT(Vals(ds.features()), ElementsAre(1, 2));
  EXPECT_THAT(Vals(ds.targets()), ElementsAre(0, 1));
}

TEST_F(CsvDatasetTest, ExplicitHeaderChoice) {
  const std::string path = Write("h.csv", "1,2,0\n3,4,1\n");
  CsvOptions yes;
  yes.header = CsvOptions::Header::kYes;
  CsvDataset with(path, yes);
  EXPECT_EQ(with.size(), 1);
  EXPECT_THAT(with.feature_names(), ElementsAre("1", "2"));
  EXPECT_EQ(CsvDataset(path).size(), 2);  // no field of the first row is text

  const std::string text = Write("t.csv", "a,b,c\n1,2,0\n");
  CsvOptions no;
  no.header = CsvOptions::Header::kNo;
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(text, no); }), HasSubstr("t.csv:1:1: expected a number, got 'a'"));
  const std::string only = Write("o.csv", "a,b\n");
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset(only, yes); }), HasSubstr("o.csv: no data rows after the header"));
}

TEST_F(CsvDatasetTest, ErrorsNameFileLineAndColumn) {
  auto error = [&](const std::string& name, const std::string& content) {
    const std::string path = Write(name, content);
    return Raises<anvil::Error>([&] { CsvDataset{path}; });
  };
  EXPECT_THAT(error("iris.csv", "a,b,c\n1,2,0\n1,abc,1\n"), HasSubstr("iris.csv:3:2: expected a number, got 'abc'"));
  EXPECT_THAT(error("data.csv", "a,b,c\n1,2,0\n1,2\n"), HasSubstr("data.csv:3: expected 3 fields, got 2"));
  EXPECT_THAT(error("wide.csv", "1,2,0\n1,2,3,4\n"), HasSubstr("wide.csv:2: expected 3 fields, got 4"));
  EXPECT_THAT(error("empty.csv", ""), HasSubstr("empty.csv: empty file"));
  EXPECT_THAT(error("blank.csv", "\n\r\n  \n"), HasSubstr("blank.csv: empty file"));
  EXPECT_THAT(error("hole.csv", "a,b,c\n1,,0\n"), HasSubstr("hole.csv:2:2: empty field"));
  EXPECT_THAT(error("gap.csv", "1,2,0\n\n1,2,0\n"), HasSubstr("gap.csv:2: blank line"));
  EXPECT_THAT(error("quote.csv", "1,2,0\n1,\"2,0\n"), HasSubstr("quote.csv:2:2: unterminated quoted field"));
  EXPECT_THAT(error("after.csv", "1,2,0\n1,\"2\"x,0\n"),
              HasSubstr("after.csv:2:2: unexpected text after the closing quote"));
  EXPECT_THAT(error("one.csv", "1\n2\n"), HasSubstr("one.csv:1: expected at least 2 fields"));
  const std::string missing = Path("nope.csv");
  EXPECT_THAT(Raises<anvil::Error>([&] { CsvDataset{missing}; }),
              AllOf(HasSubstr(missing), HasSubstr("No such file or directory")));
}

// ---------------------------------------------------------------------------------------
// IDX

using IdxTest = TempFolderTest;

// IDX bytes written from the format's definition: magic, big-endian sizes, big-endian data.
std::string IdxBytes(uint8_t type, const std::vector<uint32_t>& sizes, const std::string& data) {
  std::string b = {0, 0, static_cast<char>(type), static_cast<char>(sizes.size())};
  for (uint32_t s : sizes) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<char>(s >> shift));
  }
  return b + data;
}

TEST_F(IdxTest, ReadsHandWrittenBigEndianFiles) {
  const std::string u8 = Write("u8", IdxBytes(0x08, {2, 3}, std::string("\x01\x02\x03\xFD\xFE\xFF")));
  const Tensor a = read_idx(u8);
  EXPECT_EQ(a.dtype(), anvil::kUInt8);
  EXPECT_EQ(a.sizes(), (anvil::IntArray{2, 3}));
  EXPECT_THAT(Vals(a), ElementsAre(1, 2, 3, 253, 254, 255));

  const std::string i32 = Write("i32", IdxBytes(0x0C, {2}, std::string("\x01\x02\x03\x04\xFF\xFF\xFF\xFE", 8)));
  const Tensor b = read_idx(i32);
  EXPECT_EQ(b.dtype(), anvil::kInt32);
  EXPECT_THAT(Vals(b), ElementsAre(0x01020304, -2));

  // 1.5f is 0x3FC00000; -2.0 (double) is 0xC000000000000000.
  const Tensor c = read_idx(Write("f32", IdxBytes(0x0D, {1}, std::string("\x3F\xC0\x00\x00", 4))));
  EXPECT_EQ(c.dtype(), anvil::kFloat32);
  EXPECT_THAT(Vals(c), ElementsAre(1.5));
  const Tensor d = read_idx(Write("f64", IdxBytes(0x0E, {1}, std::string("\xC0\0\0\0\0\0\0\0", 8))));
  EXPECT_EQ(d.dtype(), anvil::kFloat64);
  EXPECT_THAT(Vals(d), ElementsAre(-2.0));
  const Tensor e = read_idx(Write("i16", IdxBytes(0x0B, {2}, std::string("\x12\x34\xFF\xFE", 4))));
  EXPECT_EQ(e.dtype(), anvil::kInt16);
  EXPECT_THAT(Vals(e), ElementsAre(0x1234, -2));
}

TEST_F(IdxTest, WriteProducesTheSpecifiedBytes) {
  write_idx(Path("w"), anvil::tensor(std::vector<int32_t>{0x01020304, -2}, anvil::IntArray{1, 2}));
  EXPECT_EQ(ReadBytes(Path("w")), IdxBytes(0x0C, {1, 2}, std::string("\x01\x02\x03\x04\xFF\xFF\xFF\xFE", 8)));
  // No temporary file is left behind by the atomic write.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(IdxTest, RoundTripsEveryDtypePlainAndGzip) {
  const std::vector<double> values = {0, 1, -1, 100, -128, 127, 0x1234, -30000};
  for (anvil::ScalarType dt :
       {anvil::kUInt8, anvil::kInt8, anvil::kInt16, anvil::kInt32, anvil::kFloat32, anvil::kFloat64}) {
    Tensor t = F64(values, anvil::IntArray{2, 2, 2});
    if (dt == anvil::kFloat32 || dt == anvil::kFloat64) t = t * 1.25 + 1e-3;
    if (dt == anvil::kInt32) t = t * 65536;
    t = t.to(dt);
    for (bool gzip : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dt << (gzip ? " gzip" : " plain"));
      const std::string path = Path(gzip ? "t.gz" : "t");
      write_idx(path, t, gzip);
      const std::string raw = ReadBytes(path);
      ASSERT_GE(raw.size(), 2u);
      EXPECT_EQ(gzip, raw[0] == '\x1f' && raw[1] == '\x8b');  // gzip magic only when asked
      const Tensor back = read_idx(path);
      EXPECT_EQ(back.dtype(), dt);
      EXPECT_EQ(back.sizes(), t.sizes());
      EXPECT_EQ(Vals(back), Vals(t));
    }
  }
  // Views are written in logical order.
  const Tensor m = Iota({3, 4}, anvil::kInt16).t();
  write_idx(Path("view"), m);
  EXPECT_EQ(Vals(read_idx(Path("view"))), Vals(m));
  EXPECT_THAT(Raises<anvil::TypeError>([&] { write_idx(Path("x"), I64({1})); }),
              HasSubstr("IDX cannot store dtype int64"));
}

TEST_F(IdxTest, ErrorsNameTheFile) {
  auto error = [&](const std::string& name, const std::string& bytes) {
    const std::string path = Write(name, bytes);
    return Raises<anvil::Error>([&] { read_idx(path); });
  };
  EXPECT_THAT(error("magic", std::string("\x01\x02\x08\x01\0\0\0\0", 8)),
              AllOf(HasSubstr("magic: not an IDX file: bad magic 0x01 0x02")));
  EXPECT_THAT(error("short", std::string("\0\0", 2)), HasSubstr("short: not an IDX file"));
  EXPECT_THAT(error("type", IdxBytes(0x0A, {1}, "x")), HasSubstr("type: unknown IDX element type code 0x0A"));
  EXPECT_THAT(error("header", std::string("\0\0\x08\x03\0\0\0\x01", 8)),
              HasSubstr("header: truncated header: declares 3 dimensions (12 bytes of sizes) but only 4"));
  EXPECT_THAT(error("trunc", IdxBytes(0x08, {10}, "abcd")),
              AllOf(HasSubstr("trunc: truncated"), HasSubstr("uint8[10] = 10 bytes of data"),
                    HasSubstr("only 4 bytes follow")));
  EXPECT_THAT(error("trunc32", IdxBytes(0x0C, {3, 2}, std::string(20, 'x'))),
              AllOf(HasSubstr("int32[3, 2] = 24 bytes"), HasSubstr("only 20 bytes")));
  // A header declaring absurd sizes is rejected without trying to allocate them.
  EXPECT_THAT(error("huge", IdxBytes(0x0E, {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF}, "abc")),
              AllOf(HasSubstr("huge: truncated"), HasSubstr("only 3 bytes")));
  EXPECT_THAT(error("trail", IdxBytes(0x08, {2}, "abXYZ")),
              HasSubstr("trail: 3 trailing bytes after the declared uint8[2] data"));
  EXPECT_THAT(error("negative", IdxBytes(0x08, {0x80000000u}, "")),
              HasSubstr("negative: corrupt header: dimension 0 has size -2147483648"));

  // A gzip file cut short: zlib's partial output must not pass for the whole file.
  write_idx(Path("cut.gz"), Iota({64, 64}, anvil::kFloat32), /*gzip=*/true);
  const std::string gz = ReadBytes(Path("cut.gz"));
  EXPECT_THAT(error("cut.gz", gz.substr(0, gz.size() / 2)), AllOf(HasSubstr("cut.gz"), HasSubstr("truncated")));
  const std::string missing = Path("absent-ubyte");
  EXPECT_THAT(Raises<anvil::Error>([&] { read_idx(missing); }),
              AllOf(HasSubstr(missing), HasSubstr("No such file or directory")));
}

TEST_F(IdxTest, DatasetPairsImagesWithLabels) {
  const Tensor images = Iota({5, 4, 3}, anvil::kUInt8);
  write_idx(Path("img"), images);
  write_idx(Path("lbl.gz"), anvil::tensor(std::vector<uint8_t>{3, 1, 4, 1, 5}), true);
  IdxDataset ds(Path("img"), Path("lbl.gz"));
  ASSERT_EQ(ds.size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    const Example ex = ds.get(i);
    const Tensor& x = ex[Example::kInput];
    EXPECT_EQ(x.dtype(), anvil::kUInt8);
    EXPECT_EQ(x.sizes(), (anvil::IntArray{4, 3}));
    EXPECT_TRUE(x.equal(images[i]));
    EXPECT_TRUE(x.is_alias_of(ds.images()));
    EXPECT_EQ(ex[Example::kTarget].dtype(), anvil::kInt64);
    EXPECT_EQ(ex[Example::kTarget].dim(), 0);
  }
  EXPECT_EQ(ds.get(2)[Example::kTarget].item<int64_t>(), 4);
  Raises<anvil::IndexError>([&] { ds.get(5); });

  write_idx(Path("lbl4"), anvil::tensor(std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_THAT(Raises<anvil::Error>([&] { IdxDataset(Path("img"), Path("lbl4")); }), HasSubstr("holds 5 images but"));
  write_idx(Path("lblf"), F32({1, 2, 3, 4, 5}));
  EXPECT_THAT(Raises<anvil::TypeError>([&] { IdxDataset(Path("img"), Path("lblf")); }),
              HasSubstr("expected integer class labels, got dtype float32"));
  write_idx(Path("lbl2d"), anvil::tensor(std::vector<uint8_t>(10, 1), anvil::IntArray{5, 2}));
  EXPECT_THAT(Raises<anvil::Error>([&] { IdxDataset(Path("img"), Path("lbl2d")); }), HasSubstr("expected labels [N]"));
  write_idx(Path("lblneg"), anvil::tensor(std::vector<int8_t>{0, 1, -1, 2, 3}));
  EXPECT_THAT(Raises<anvil::Error>([&] { IdxDataset(Path("img"), Path("lblneg")); }),
              HasSubstr("must be non-negative, found -1"));
}

TEST_F(IdxTest, MnistFindsPlainOrGzipFilesAndListsWhatItTried) {
  const Tensor images = Iota({3, 28, 28}, anvil::kUInt8);
  write_idx(Path("train-images-idx3-ubyte.gz"), images, true);
  write_idx(Path("train-labels-idx1-ubyte"), anvil::tensor(std::vector<uint8_t>{7, 2, 1}));
  const IdxDataset train = mnist(dir_.string(), /*train=*/true);
  EXPECT_EQ(train.size(), 3);
  EXPECT_TRUE(train.get(1)[Example::kInput].equal(images[1]));
  EXPECT_EQ(train.get(0)[Example::kTarget].item<int64_t>(), 7);

  // torchvision's layout: root/MNIST/raw.
  fs::create_directories(dir_ / "MNIST" / "raw");
  write_idx((dir_ / "MNIST" / "raw" / "t10k-images-idx3-ubyte").string(), images);
  const std::string msg = Raises<anvil::Error>([&] { mnist(dir_.string(), /*train=*/false); });
  EXPECT_THAT(msg, AllOf(HasSubstr("cannot find t10k-labels-idx1-ubyte"),
                         HasSubstr(Path("t10k-labels-idx1-ubyte") + " "), HasSubstr(Path("t10k-labels-idx1-ubyte.gz")),
                         HasSubstr((dir_ / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").string())));
  write_idx((dir_ / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").string(), anvil::tensor(std::vector<uint8_t>{0, 1, 2}));
  EXPECT_EQ(mnist(dir_.string(), false).size(), 3);
}

// ---------------------------------------------------------------------------------------
// Image folders

using ImageFolderTest = TempFolderTest;

// A uint8 [h, w, c] image whose pixels depend on all coordinates and `salt`.
Tensor TestImage(int64_t h, int64_t w, int64_t c, int salt) {
  std::vector<uint8_t> px;
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t k = 0; k < c; ++k) px.push_back(static_cast<uint8_t>(y * 37 + x * 11 + k * 85 + salt * 29));
    }
  }
  return anvil::tensor(px, anvil::IntArray{h, w, c});
}

TEST_F(ImageFolderTest, ClassesSortedImagesDecodedExactly) {
  fs::create_directories(dir_ / "dog" / "sub");
  fs::create_directories(dir_ / "cat");
  fs::create_directories(dir_ / ".cache");
  const Tensor cat_a = TestImage(5, 7, 3, 1), cat_b = TestImage(6, 4, 3, 2);
  const Tensor dog_x = TestImage(3, 5, 3, 3), dog_y = TestImage(9, 2, 3, 4);
  write_png(Path("cat/b.png"), cat_b);
  write_png(Path("cat/a.PNG"), cat_a);      // extensions match case-insensitively
  write_bmp(Path("dog/x.bmp"), dog_x);      // 5 * 3 bytes per row: BMP row padding exercised
  write_png(Path("dog/sub/y.png"), dog_y);  // class folders are searched recursively
  write_png(Path("dog/.hidden.png"), dog_y);
  write_png(Path(".cache/z.png"), dog_y);
  Write("dog/notes.txt", "not an image");
  Write("top.png", "files directly in root are ignored");

  ImageFolder ds(dir_.string());
  EXPECT_THAT(ds.classes(), ElementsAre("cat", "dog"));
  ASSERT_EQ(ds.size(), 4);
  const std::vector<std::pair<std::string, Tensor>> expected = {
      {"cat/a.PNG", cat_a}, {"cat/b.png", cat_b}, {"dog/sub/y.png", dog_y}, {"dog/x.bmp", dog_x}};
  for (int64_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(expected[static_cast<size_t>(i)].first);
    EXPECT_EQ(ds.path(i), Path(expected[static_cast<size_t>(i)].first));
    const Example ex = ds.get(i);
    const Tensor& x = ex[Example::kInput];
    EXPECT_EQ(x.dtype(), anvil::kUInt8);
    EXPECT_TRUE(x.equal(expected[static_cast<size_t>(i)].second));
    EXPECT_EQ(ex[Example::kTarget].dtype(), anvil::kInt64);
    EXPECT_EQ(ex[Example::kTarget].dim(), 0);
    EXPECT_EQ(ex[Example::kTarget].item<int64_t>(), i < 2 ? 0 : 1);
    EXPECT_EQ(ds.label(i), i < 2 ? 0 : 1);
  }
  EXPECT_THAT(ds.name(), HasSubstr("4 images, 2 classes"));
  Raises<anvil::IndexError>([&] { ds.get(4); });

  ImageFolderOptions bmp_only;
  bmp_only.extensions = {"BMP"};
  bmp_only.allow_empty_classes = true;  // cat has no BMP
  ImageFolder only(dir_.string(), bmp_only);
  EXPECT_EQ(only.size(), 1);
  EXPECT_EQ(only.label(0), 1);
  EXPECT_THAT(Raises<anvil::Error>([&] {
                ImageFolder(dir_.string(), ImageFolderOptions{3, {"bmp"}, false});
              }),
              HasSubstr("class folders without images (extensions bmp): cat"));
}

TEST_F(ImageFolderTest, ChannelConversions) {
  fs::create_directories(dir_ / "a");
  const Tensor gray = TestImage(4, 6, 1, 5);
  write_png(Path("a/g.png"), gray);
  ImageFolderOptions stored;
  stored.channels = 0;
  EXPECT_TRUE(ImageFolder(dir_.string(), stored).get(0)[Example::kInput].equal(gray));
  // Gray expands to RGB by repeating the level in every channel.
  const Tensor rgb = ImageFolder(dir_.string()).get(0)[Example::kInput];
  EXPECT_EQ(rgb.sizes(), (anvil::IntArray{4, 6, 3}));
  for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(rgb.select(2, c).equal(gray.select(2, 0)));
  // RGBA with all four channels kept.
  const Tensor rgba = TestImage(3, 3, 4, 6);
  write_png(Path("a/g.png"), rgba);
  stored.channels = 4;
  EXPECT_TRUE(ImageFolder(dir_.string(), stored).get(0)[Example::kInput].equal(rgba));
  EXPECT_TRUE(read_image(Path("a/g.png"), 0).equal(rgba));
  stored.channels = 5;
  EXPECT_THAT(Raises<anvil::Error>([&] { ImageFolder(dir_.string(), stored); }),
              HasSubstr("channels must be 0 (as stored) or 1 to 4, got 5"));
}

TEST_F(ImageFolderTest, ConcurrentReadsMatchSequentialOnes) {
  fs::create_directories(dir_ / "c0");
  fs::create_directories(dir_ / "c1");
  for (int i = 0; i < 6; ++i) {
    write_png(Path("c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".png"), TestImage(8 + i, 5, 3, i));
  }
  Write("c1/broken.png", "garbage");
  const ImageFolder ds(dir_.string());
  ASSERT_EQ(ds.size(), 7);
  std::vector<Tensor> reference;
  std::vector<std::string> errors(static_cast<size_t>(ds.size()));
  for (int64_t i = 0; i < ds.size(); ++i) {
    errors[static_cast<size_t>(i)] = ErrorOf([&] { reference.push_back(ds.get(i)[Example::kInput]); });
    if (!errors[static_cast<size_t>(i)].empty()) reference.emplace_back();
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (int64_t i = 0; i < ds.size(); ++i) {
          Tensor x;
          const std::string err = ErrorOf([&] { x = ds.get(i)[Example::kInput]; });
          const auto k = static_cast<size_t>(i);
          if (err != errors[k] || (err.empty() && !x.equal(reference[k]))) ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

TEST_F(ImageFolderTest, Errors) {
  const std::string missing = Path("absent");
  EXPECT_THAT(Raises<anvil::Error>([&] { ImageFolder{missing}; }),
              AllOf(HasSubstr(missing), HasSubstr("no such folder")));
  Write("file", "x");
  EXPECT_THAT(Raises<anvil::Error>([&] { ImageFolder{Path("file")}; }), HasSubstr("not a folder"));
  fs::create_directories(dir_ / "empty_root");
  EXPECT_THAT(Raises<anvil::Error>([&] { ImageFolder{Path("empty_root")}; }), HasSubstr("no class folders"));
  fs::create_directories(dir_ / "r" / "a");
  fs::create_directories(dir_ / "r" / "b");
  Write("r/a/readme.txt", "x");
  EXPECT_THAT(Raises<anvil::Error>([&] { ImageFolder{Path("r")}; }), HasSubstr("no images"));
  write_png(Path("r/a/ok.png"), TestImage(2, 2, 3, 0));
  EXPECT_THAT(Raises<anvil::Error>([&] { ImageFolder{Path("r")}; }),
              HasSubstr("class folders without images (extensions png, jpg, jpeg, bmp): b"));

  // A corrupt file fails in get(), naming the file and the decoder's reason.
  Write("r/b/bad.jpg", "\xFF\xD8\xFF this is not really a JPEG");
  Write("r/b/empty.png", "");
  ImageFolder ds(Path("r"));
  ASSERT_EQ(ds.size(), 3);
  for (int64_t i : {1, 2}) {
    const std::string msg = Raises<anvil::Error>([&] { ds.get(i); });
    EXPECT_THAT(msg, HasSubstr(ds.path(i) + ": cannot decode image: "));
    EXPECT_GT(msg.size(), (ds.path(i) + ": cannot decode image: ").size());  // a reason follows
  }
  EXPECT_THAT(Raises<anvil::TypeError>([&] {
                write_png(Path("f.png"), F32({1, 2}, anvil::IntArray{1, 2}));
              }),
              HasSubstr("expected a uint8 image"));
}

// ---------------------------------------------------------------------------------------
// Digits

using DigitsTest = TempFolderTest;

// The folder holding digits.csv.gz: $ANVIL_DATA_DIR, else the source tree's data/; empty
// when neither has it.
std::string DigitsDir() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("ANVIL_DATA_DIR"); env != nullptr && *env != '\0') dirs.push_back(env);
  dirs.push_back(anvil::test::TestDataDir());
  for (const std::string& d : dirs) {
    if (fs::is_regular_file(fs::path(d) / "digits.csv.gz")) return d;
  }
  return "";
}

// The rows of a gzip CSV of integers, read with zlib and iostreams, independent of Anvil.
std::vector<std::vector<int>> ReadGzRows(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  int got = 0;
  while ((got = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(got));
  gzclose(f);
  std::vector<std::vector<int>> rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<int> row;
    std::istringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ',')) row.push_back(static_cast<int>(std::lround(std::stod(field))));
    rows.push_back(row);
  }
  return rows;
}

TEST_F(DigitsTest, LoadsTheFetchedFile) {
  const std::string dir = DigitsDir();
  if (dir.empty()) {
    GTEST_SKIP() << "digits.csv.gz not found in $ANVIL_DATA_DIR or " << anvil::test::TestDataDir()
                 << "; fetch it with scripts/fetch-data.sh " << anvil::test::TestDataDir() << " (or make data)";
  }
  const Digits ds(dir);
  ASSERT_EQ(ds.size(), 1797);
  EXPECT_EQ(ds.path(), (fs::path(dir) / "digits.csv.gz").string());
  EXPECT_EQ(ds.images().sizes(), (anvil::IntArray{1797, 64}));
  EXPECT_EQ(ds.images().dtype(), anvil::kFloat32);
  EXPECT_EQ(ds.images().min().item<float>(), 0.0f);
  EXPECT_EQ(ds.images().max().item<float>(), 16.0f);
  // Everything against an independent reading of the file: per-class counts, and the first
  // and last rows in full.
  const std::vector<std::vector<int>> rows = ReadGzRows(ds.path());
  ASSERT_EQ(rows.size(), 1797u);
  std::map<int64_t, int64_t> counts, expected_counts;
  for (int64_t label : ds.targets().to_vector<int64_t>()) ++counts[label];
  for (const std::vector<int>& row : rows) {
    ASSERT_EQ(row.size(), 65u);
    ++expected_counts[row[64]];
  }
  EXPECT_EQ(counts, expected_counts);
  ASSERT_EQ(counts.size(), 10u);
  int64_t total = 0;
  for (const auto& [label, count] : counts) {
    EXPECT_GE(label, 0);
    EXPECT_LE(label, 9);
    EXPECT_GT(count, 150) << "class " << label;  // the set is roughly balanced
    total += count;
  }
  EXPECT_EQ(total, 1797);
  for (int64_t i : {int64_t{0}, int64_t{1796}}) {
    const std::vector<int>& row = rows[static_cast<size_t>(i)];
    const Example ex = ds.get(i);
    EXPECT_EQ(Vals(ex[Example::kInput]), std::vector<double>(row.begin(), row.begin() + 64));
    EXPECT_EQ(ex[Example::kTarget].item<int64_t>(), row[64]);
    EXPECT_EQ(ex[Example::kTarget].dtype(), anvil::kInt64);
  }

  const Digits as_image(ds.path(), DigitsOptions{.as_image = true});
  const Tensor img = as_image.get(5)[Example::kInput];
  EXPECT_EQ(img.sizes(), (anvil::IntArray{1, 8, 8}));
  EXPECT_TRUE(img.reshape({64}).equal(ds.get(5)[Example::kInput]));
}

// A file in the digits layout: 1797 rows of 64 pixel values and a label.
std::string DigitsCsv(int rows, int bad_row = -1, const std::string& bad_field = "", int bad_col = 0) {
  std::string s;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < 65; ++c) {
      std::string v = std::to_string(c < 64 ? (r + c) % 17 : r % 10);
      if (r == bad_row && c == bad_col) v = bad_field;
      s += v + (c < 64 ? "," : "\n");
    }
  }
  return s;
}

TEST_F(DigitsTest, ValidatesTheFile) {
  const Digits ok(WriteGz("ok.csv.gz", DigitsCsv(1797)));
  EXPECT_EQ(ok.get(3)[Example::kTarget].item<int64_t>(), 3);
  EXPECT_EQ(ok.get(3)[Example::kInput][1].item<float>(), 4.0f);

  EXPECT_THAT(Raises<anvil::Error>([&] { Digits(WriteGz("short.csv.gz", DigitsCsv(1000))); }),
              HasSubstr("short.csv.gz: expected 1797 rows, got 1000"));
  EXPECT_THAT(Raises<anvil::Error>([&] { Digits(WriteGz("px.csv.gz", DigitsCsv(1797, 11, "17", 4))); }),
              HasSubstr("px.csv.gz:12:5: expected a pixel value 0..16, got 17"));
  EXPECT_THAT(Raises<anvil::Error>([&] { Digits(WriteGz("lbl.csv.gz", DigitsCsv(1797, 0, "10", 64))); }),
              HasSubstr("lbl.csv.gz:1:65: expected a digit 0..9, got 10"));
  EXPECT_THAT(Raises<anvil::Error>([&] { Digits(WriteGz("txt.csv.gz", DigitsCsv(1797, 6, "x", 2))); }),
              HasSubstr("txt.csv.gz:7:3: expected a number, got 'x'"));
  EXPECT_THAT(Raises<anvil::Error>([&] { Digits(WriteGz("narrow.csv.gz", "1,2,3\n")); }),
              HasSubstr("narrow.csv.gz:1: expected 65 fields"));
}

TEST_F(DigitsTest, MissingFileSaysHowToFetchIt) {
  const std::string msg = Raises<anvil::Error>([&] { find_digits(dir_.string()); });
  EXPECT_THAT(msg, AllOf(HasSubstr(Path("digits.csv.gz")), HasSubstr("scripts/fetch-data.sh " + dir_.string())));
  EXPECT_THAT(Raises<anvil::Error>([&] { Digits{dir_.string()}; }), HasSubstr("scripts/fetch-data.sh"));
  EXPECT_THAT(Raises<anvil::Error>([&] { Digits{Path("elsewhere/digits.csv.gz")}; }),
              HasSubstr("scripts/fetch-data.sh"));
  WriteGz("digits.csv.gz", DigitsCsv(1797));
  EXPECT_EQ(find_digits(dir_.string()), Path("digits.csv.gz"));
  EXPECT_EQ(Digits(dir_.string()).size(), 1797);
}

TEST(DigitsDataDirTest, EnvironmentOverridesTheDefault) {
  const char* old = std::getenv("ANVIL_DATA_DIR");
  const std::string saved = old != nullptr ? old : "";
  setenv("ANVIL_DATA_DIR", "/some/where", 1);
  EXPECT_EQ(default_data_dir(), "/some/where");
  setenv("ANVIL_DATA_DIR", "", 1);
  EXPECT_EQ(default_data_dir(), "data");
  unsetenv("ANVIL_DATA_DIR");
  EXPECT_EQ(default_data_dir(), "data");
  if (old != nullptr) setenv("ANVIL_DATA_DIR", saved.c_str(), 1);
}

// ---------------------------------------------------------------------------------------
// Synthetic

TEST(SyntheticTest, BlobsAreDeterministicAndPerIndex) {
  const TensorDataset a = make_blobs(300, 3, 4, 0.5, 7), b = make_blobs(300, 3, 4, 0.5, 7);
  EXPECT_TRUE(a.field(Example::kInput).equal(b.field(Example::kInput)));
  EXPECT_TRUE(a.field(Example::kTarget).equal(b.field(Example::kTarget)));
  const TensorDataset c = make_blobs(300, 3, 4, 0.5, 8);
  EXPECT_FALSE(a.field(Example::kInput).equal(c.field(Example::kInput)));
  // Sample i does not depend on n.
  const TensorDataset few = make_blobs(10, 3, 4, 0.5, 7);
  EXPECT_TRUE(few.field(Example::kInput).equal(a.field(Example::kInput).narrow(0, 0, 10)));
}

TEST(SyntheticTest, BlobsShapesBalanceAndClusterStatistics) {
  const int64_t n = 3001, k = 3, f = 4;
  const double std_dev = 0.5;
  const TensorDataset ds = make_blobs(n, k, f, std_dev, 11);
  ASSERT_EQ(ds.size(), n);
  const Example ex = ds.get(4);
  EXPECT_EQ(ex[Example::kInput].sizes(), (anvil::IntArray{f}));
  EXPECT_EQ(ex[Example::kInput].dtype(), anvil::kFloat32);
  EXPECT_EQ(ex[Example::kTarget].dtype(), anvil::kInt64);
  EXPECT_EQ(ex[Example::kTarget].dim(), 0);

  const std::vector<float> x = ds.field(Example::kInput).to_vector<float>();
  const std::vector<int64_t> y = ds.field(Example::kTarget).to_vector<int64_t>();
  const std::vector<float> centers = blob_centers(k, f, 11).to_vector<float>();
  for (float c : centers) {
    EXPECT_GT(c, -10.0f);
    EXPECT_LT(c, 10.0f);
  }
  std::vector<int64_t> count(k, 0);
  std::vector<double> sum(k * f, 0), sq(k * f, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = y[static_cast<size_t>(i)];
    ASSERT_TRUE(label >= 0 && label < k);
    ++count[static_cast<size_t>(label)];
    for (int64_t j = 0; j < f; ++j) {
      const double v = x[static_cast<size_t>(i * f + j)];
      sum[static_cast<size_t>(label * f + j)] += v;
      sq[static_cast<size_t>(label * f + j)] += v * v;
    }
  }
  EXPECT_THAT(count, ElementsAre(1001, 1000, 1000));  // round-robin: sizes differ by at most one
  for (int64_t c = 0; c < k; ++c) {
    const double m = static_cast<double>(count[static_cast<size_t>(c)]);
    for (int64_t j = 0; j < f; ++j) {
      const auto idx = static_cast<size_t>(c * f + j);
      const double mean = sum[idx] / m;
      const double sd = std::sqrt(sq[idx] / m - mean * mean);
      // Five standard errors: a false failure has probability ~1e-6 per coordinate.
      EXPECT_NEAR(mean, centers[idx], 5 * std_dev / std::sqrt(m)) << "class " << c << " feature " << j;
      EXPECT_NEAR(sd, std_dev, 0.1 * std_dev) << "class " << c << " feature " << j;
    }
  }
}

TEST(SyntheticTest, SpiralsAreInterleavedRotatedArms) {
  const int64_t n = 600, k = 3;
  const TensorDataset noisy = make_spirals(n, k, 0.05, 3);
  EXPECT_TRUE(noisy.field(Example::kInput).equal(make_spirals(n, k, 0.05, 3).field(Example::kInput)));
  EXPECT_FALSE(noisy.field(Example::kInput).equal(make_spirals(n, k, 0.05, 4).field(Example::kInput)));
  EXPECT_EQ(noisy.field(Example::kInput).sizes(), (anvil::IntArray{n, 2}));
  EXPECT_EQ(noisy.get(0)[Example::kTarget].dtype(), anvil::kInt64);

  // Without noise, class c's arm is class 0's arm rotated by 2*pi*c/k, and points move
  // outward along each arm.
  const TensorDataset clean = make_spirals(n, k, 0.0, 3);
  const std::vector<float> x = clean.field(Example::kInput).to_vector<float>();
  const std::vector<int64_t> y = clean.field(Example::kTarget).to_vector<int64_t>();
  std::vector<int64_t> count(k, 0);
  for (int64_t i = 0; i < n; ++i) ++count[static_cast<size_t>(y[static_cast<size_t>(i)])];
  EXPECT_THAT(count, ElementsAre(200, 200, 200));
  for (int64_t i = 0; i + k < n; i += k) {
    const double x0 = x[static_cast<size_t>(2 * i)], y0 = x[static_cast<size_t>(2 * i + 1)];
    const double r0 = std::hypot(x0, y0);
    EXPECT_GT(r0, 0.0);
    EXPECT_LE(r0, 1.0);
    const double r_next = std::hypot(x[static_cast<size_t>(2 * (i + k))], x[static_cast<size_t>(2 * (i + k) + 1)]);
    EXPECT_GT(r_next, r0);
    for (int64_t c = 1; c < k; ++c) {
      const double a = 2 * std::numbers::pi * static_cast<double>(c) / static_cast<double>(k);
      EXPECT_EQ(y[static_cast<size_t>(i + c)], c);
      EXPECT_NEAR(x[static_cast<size_t>(2 * (i + c))], x0 * std::cos(a) - y0 * std::sin(a), 1e-5);
      EXPECT_NEAR(x[static_cast<size_t>(2 * (i + c) + 1)], x0 * std::sin(a) + y0 * std::cos(a), 1e-5);
    }
  }
}

TEST(SyntheticTest, RandomImagesAreLazyDeterministicAndLabelled) {
  const RandomImages ds(1000, 12, 10, 3, 7, 5);
  EXPECT_EQ(ds.size(), 1000);
  const Tensor a = ds.get(42)[Example::kInput];
  EXPECT_EQ(a.dtype(), anvil::kUInt8);
  EXPECT_EQ(a.sizes(), (anvil::IntArray{12, 10, 3}));
  EXPECT_TRUE(a.equal(ds.get(42)[Example::kInput]));
  EXPECT_TRUE(a.equal(RandomImages(50, 12, 10, 3, 7, 5).get(42)[Example::kInput]));
  EXPECT_FALSE(a.equal(ds.get(43)[Example::kInput]));
  EXPECT_FALSE(a.equal(RandomImages(1000, 12, 10, 3, 7, 6).get(42)[Example::kInput]));
  for (int64_t i : {0, 6, 7, 999}) {
    const Tensor t = ds.get(i)[Example::kTarget];
    EXPECT_EQ(t.dtype(), anvil::kInt64);
    EXPECT_EQ(t.dim(), 0);
    EXPECT_EQ(t.item<int64_t>(), i % 7);
  }
  // Not constant: the content spans a good part of the range.
  const std::vector<uint8_t> px = a.to_vector<uint8_t>();
  const auto [lo, hi] = std::minmax_element(px.begin(), px.end());
  EXPECT_GT(*hi - *lo, 32);
  Raises<anvil::IndexError>([&] { ds.get(1000); });
  Raises<anvil::Error>([&] { RandomImages(1, 0, 1, 1, 1, 0); });
  Raises<anvil::Error>([&] { make_blobs(10, 0, 2, 1.0, 0); });
  Raises<anvil::Error>([&] { make_spirals(10, 2, -1.0, 0); });
}

}  // namespace
