#include "core/data/datasets/digits.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/data/datasets/csv.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

constexpr int64_t kPixels = 64;
constexpr float kMaxPixel = 16;

std::string FetchHint(const std::string& data_dir) {
  return anvil::detail::StrCat("fetch it with `scripts/fetch-data.sh ", data_dir, "` or `make data DATA_DIR=", data_dir,
                               "` from the source tree (it extracts the file from Debian's "
                               "python3-sklearn package)");
}

}  // namespace

std::string default_data_dir() {
  const char* env = std::getenv("ANVIL_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("data");
}

std::string find_digits(const std::string& data_dir) {
  const std::string path = (std::filesystem::path(data_dir) / "digits.csv.gz").string();
  std::error_code ec;
  ANVIL_CHECK(std::filesystem::is_regular_file(path, ec), "digits data not found: ", path, " does not exist; ",
              FetchHint(data_dir));
  return path;
}

Digits::Digits(const std::string& path_or_data_dir, DigitsOptions options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_or_data_dir, ec)) {
    path_ = find_digits(path_or_data_dir);
  } else {
    path_ = path_or_data_dir;
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    ANVIL_CHECK(std::filesystem::exists(path_, ec), "digits data not found: ", path_, " does not exist; ",
                FetchHint(dir.empty() ? "." : dir));
  }
  // The file is a plain header-less CSV; CsvDataset parses it (through zlib) and reports
  // malformed rows as path:line:column. What is left is checking it is the digits set.
  CsvOptions csv;
  csv.delimiter = ',';
  csv.header = CsvOptions::Header::kNo;
  csv.label_column = int64_t{-1};
  csv.target = CsvOptions::Target::kClass;
  const CsvDataset table(path_, csv);
  ANVIL_CHECK(table.num_features() == kPixels, path_, ":1: expected ", kPixels + 1,
              " fields (64 pixel values, then the label), got ", table.num_features() + 1);
  ANVIL_CHECK(table.size() == kNumSamples, path_, ": expected ", kNumSamples, " rows, got ", table.size());

  // Rows are lines one to one (no header; CsvDataset rejects blank lines inside the data).
  const float* px = table.features().data_ptr<float>();
  for (int64_t r = 0; r < kNumSamples; ++r) {
    for (int64_t c = 0; c < kPixels; ++c) {
      const float v = px[r * kPixels + c];
      ANVIL_CHECK(v >= 0 && v <= kMaxPixel && v == static_cast<float>(static_cast<int>(v)), path_, ":", r + 1, ":",
                  c + 1, ": expected a pixel value 0..16, got ", v);
    }
  }
  const int64_t* labels = table.targets().data_ptr<int64_t>();
  for (int64_t r = 0; r < kNumSamples; ++r) {
    ANVIL_CHECK(labels[r] >= 0 && labels[r] < kNumClasses, path_, ":", r + 1, ":", kPixels + 1,
                ": expected a digit 0..9, got ", labels[r]);
  }
  images_ = options.as_image ? table.features().view({kNumSamples, 1, 8, 8}) : table.features();
  targets_ = table.targets();
}

Example Digits::get(int64_t index) const {
  CheckIndex(index);
  return Example{{Example::kInput, images_.select(0, index)}, {Example::kTarget, targets_.select(0, index)}};
}

std::string Digits::name() const {
  IntArray sample(images_.sizes().begin() + 1, images_.sizes().end());
  return anvil::detail::StrCat("Digits(", size(), " samples of float32", shape_str(sample), ")");
}

}  // namespace anvil::data
