// CsvDataset: a table of numbers from a CSV or TSV file, one sample per row, one column
// holding the target (a class label or a regression value). The whole file is parsed at
// construction into a float32 feature matrix [N, F] and a target vector; get(i) returns
// views of row i, so reads cost no parsing and no copy.
//
// Format: one record per line, fields split on the delimiter; a field may be enclosed in
// double quotes (then it may contain the delimiter, and "" stands for one quote), but not a
// line break. Spaces around unquoted fields are ignored. CRLF line ends, a UTF-8 byte-order
// mark and blank lines at the end of the file are tolerated. gzip-compressed files (.csv.gz)
// are read transparently.
//
// Errors are anvil::Error naming the place as path:line:column (1-based; the column is the
// field number), e.g. "iris.csv:12:3: expected a number, got 'abc'" or
// "data.csv:7: expected 5 fields, got 4". A missing file names the system's reason.
//
// Thread-safety: immutable after construction; concurrent get() calls are safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/data/dataset.h"
#include "core/tensor/tensor.h"

namespace anvil::data {

struct CsvOptions {
  enum class Header { kAuto, kYes, kNo };
  enum class Target { kAuto, kClass, kRegression };

  // The field separator; unset means '\t' for names ending in .tsv or .tab (before an
  // optional .gz, case-insensitive) and ',' otherwise.
  std::optional<char> delimiter;
  // kAuto: the first row is a header when one of its fields is not a number while the same
  // column holds a number in the second row (so a header-less file whose label column holds
  // class names is still read as data). A label column given by name implies a header.
  Header header = Header::kAuto;
  // The target column: a header name, or an index (0-based; negative counts from the end,
  // so the default -1 is the last column). All other columns are features and must hold
  // numbers.
  std::variant<int64_t, std::string> label_column = int64_t{-1};
  // kAuto: class labels when every target is an integer or any target is not a number;
  // regression (float32) otherwise. Integer-valued regression targets (counts, prices in
  // whole units) therefore need kRegression.
  Target target = Target::kAuto;
  // A directory the file must be opened beneath (a server's data root; core/util/confined_open.h).
  std::string confine_to;
};

// What a file's first lines say about its table: whether it has a header, the feature
// columns' names and the target column's, under `options` (its header detection and
// label_column) and with CsvDataset's errors for them. Reads the first two lines only (at
// most 1 MiB), so a server checks a job's label_column when the job is submitted, not when it
// starts; the rows are checked when the dataset is read.
struct CsvColumns {
  bool header = false;
  std::vector<std::string> feature_names;
  std::string target_name;
};
CsvColumns read_csv_columns(const std::string& path, const CsvOptions& options = {});

class CsvDataset : public Dataset {
 public:
  explicit CsvDataset(std::string path, CsvOptions options = {});

  int64_t size() const override { return features_.size(0); }
  // input: float32 [F]; target: int64 [] for classes, float32 [] for regression.
  Example get(int64_t index) const override;
  // "CsvDataset(iris.csv: 150 samples, 4 features, 3 classes)".
  std::string name() const override;

  const Tensor& features() const { return features_; }  // float32 [N, F]
  const Tensor& targets() const { return targets_; }    // int64 [N] or float32 [N]
  bool is_classification() const { return targets_.dtype() == kInt64; }
  int64_t num_features() const { return features_.size(1); }
  // Class labels: with class names in the file, index k is the k-th name in sorted (byte)
  // order and classes() lists the names; with integer labels, the label is the class index
  // itself (it must be >= 0) and classes() is empty. num_classes() is the largest index + 1.
  const std::vector<std::string>& classes() const { return classes_; }
  int64_t num_classes() const { return num_classes_; }
  // The header's names of the feature columns, in order, or "column 1", ... without a header.
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  // The header's name of the target column, or "column K" without a header.
  const std::string& target_name() const { return target_name_; }

 private:
  std::string path_;
  Tensor features_;
  Tensor targets_;
  std::vector<std::string> classes_;
  int64_t num_classes_ = 0;
  std::vector<std::string> feature_names_;
  std::string target_name_;
};

}  // namespace anvil::data
