// The predict command's input files (client/input_file.h), read as `anvil predict --input`
// reads them: images fitted to the model's input (and saying so when resized), CSV rows with
// a label column, JSON samples, and refusals that name the file, the line and what was
// expected.
#include "client/input_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/data/datasets/image_folder.h"

namespace anvil::client {
namespace {

using ::testing::HasSubstr;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("anvil_input_file_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string Png(const std::string& name, const Tensor& pixels) {
    const std::string path = (dir_ / name).string();
    data::write_png(path, pixels);
    return path;
  }
  static std::vector<float> Values(const v1::Tensor& t) {
    std::vector<float> v(t.raw().size() / sizeof(float));
    std::memcpy(v.data(), t.raw().data(), t.raw().size());
    return v;
  }
  static std::string ErrorOf(const std::string& path, const std::vector<int64_t>& shape,
                             const std::string& label_column = "") {
    try {
      read_input_file(path, shape, label_column);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::filesystem::path dir_;
};

// A gray image, pixel (r, c) = 20 r + c.
Tensor Gray(int64_t h, int64_t w) {
  return (arange(0, h).unsqueeze(1) * 20 + arange(0, w).unsqueeze(0)).to(kUInt8).unsqueeze(2);
}

TEST_F(InputFileTest, AnImageOfTheModelsSizeIsItsPixelsScaledToOneAndNotResized) {
  const Tensor pixels = Gray(8, 8);
  const InputFile in = read_input_file(Png("exact.png", pixels), {1, 8, 8});
  EXPECT_THAT(std::vector<int64_t>(in.tensor.shape().begin(), in.tensor.shape().end()),
              ::testing::ElementsAre(1, 1, 8, 8));
  EXPECT_EQ(in.note, "");
  const std::vector<float> v = Values(in.tensor);
  const std::vector<uint8_t> want = pixels.reshape({-1}).to_vector<uint8_t>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(v[i], static_cast<float>(want[i] / 255.0)) << i;
  // A flat model of a square number of features takes the same image as gray pixels.
  const InputFile flat = read_input_file(Png("flat.png", pixels), {64});
  EXPECT_EQ(Values(flat.tensor), v);
}

TEST_F(InputFileTest, AResizedImageSaysSoAndWhetherItsAspectRatioWasKept) {
  const InputFile stretched = read_input_file(Png("wide.png", Gray(10, 12)), {1, 8, 8});
  EXPECT_THAT(stretched.note, HasSubstr("resized 12x10 -> 8x8 (bilinear, aspect ratio not kept)"));
  EXPECT_THAT(stretched.note, HasSubstr("wide.png"));
  for (float x : Values(stretched.tensor)) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LE(x, 1.0f);
  }
  const InputFile scaled = read_input_file(Png("big.png", Gray(16, 16)), {1, 8, 8});
  EXPECT_THAT(scaled.note, HasSubstr("resized 16x16 -> 8x8 (bilinear)"));
  EXPECT_THAT(scaled.note, ::testing::Not(HasSubstr("aspect ratio")));
  // Three channels from a gray file: each channel the gray value.
  const InputFile rgb = read_input_file(Png("gray.png", Gray(4, 4)), {3, 4, 4});
  const std::vector<float> v = Values(rgb.tensor);
  ASSERT_EQ(v.size(), 48u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(v[i], v[16 + i]);
    EXPECT_EQ(v[i], v[32 + i]);
  }
}

TEST_F(InputFileTest, AnImageForAModelThatTakesNoImageIsRefusedWithTheShape) {
  const std::string png = Png("x.png", Gray(4, 4));
  EXPECT_THAT(ErrorOf(png, {10}), HasSubstr("takes 10 features, not an image"));
  EXPECT_THAT(ErrorOf(png, {2, 3}), HasSubstr("not an image shape"));
  EXPECT_THAT(ErrorOf(Write("broken.png", "not a png"), {1, 4, 4}), HasSubstr("broken.png"));
  EXPECT_THAT(ErrorOf(png, {1, 4, 4}, "label"), HasSubstr("only for CSV input"));
}

TEST_F(InputFileTest, CsvRowsWithALabelColumnByNameOrIndex) {
  const std::string csv = Write("rows.csv", "a,b,label,c\n1,2,cat,3\n4,5,dog,6\n");
  const InputFile by_name = read_input_file(csv, {3}, "label");
  EXPECT_THAT(by_name.labels, ::testing::ElementsAre("cat", "dog"));
  EXPECT_THAT(Values(by_name.tensor), ::testing::ElementsAre(1, 2, 3, 4, 5, 6));
  const InputFile by_index = read_input_file(csv, {3}, "2");
  EXPECT_EQ(by_index.labels, by_name.labels);
  EXPECT_EQ(Values(by_index.tensor), Values(by_name.tensor));
  EXPECT_THAT(ErrorOf(csv, {3}, "9"), HasSubstr("the rows have 4 columns"));
  EXPECT_THAT(ErrorOf(csv, {3}, "size"), HasSubstr("\"size\": not in the header row"));
  EXPECT_THAT(ErrorOf(Write("extra.csv", "1,2,3,4\n"), {3}), HasSubstr("a label column? name it with --label-column"));
  EXPECT_THAT(ErrorOf(Write("bad.csv", "1,2,3\n4,x,6\n"), {3}), HasSubstr("bad.csv:2: expected numbers"));
  EXPECT_THAT(ErrorOf(Write("empty.csv", "# nothing\n"), {3}), HasSubstr("no samples"));
}

TEST_F(InputFileTest, JsonSamplesAreFlattenedAndCounted) {
  const InputFile in = read_input_file(Write("s.json", "[[[1,2],[3,4]], [5,6,7,8]]"), {2, 2});
  EXPECT_THAT(std::vector<int64_t>(in.tensor.shape().begin(), in.tensor.shape().end()),
              ::testing::ElementsAre(2, 2, 2));
  EXPECT_THAT(Values(in.tensor), ::testing::ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_THAT(ErrorOf(Write("short.json", "[[1,2,3]]"), {2, 2}), HasSubstr("sample 0: expected 4 numbers, got 3"));
  EXPECT_THAT(ErrorOf(Write("text.json", "[[\"a\"]]"), {1}), HasSubstr("expected numbers, got string"));
  EXPECT_THAT(ErrorOf(Write("object.json", "{}"), {1}), HasSubstr("expected a JSON array"));
}

}  // namespace
}  // namespace anvil::client
