// Digits: the UCI optical recognition of handwritten digits test set (E. Alpaydin and
// C. Kaynak, 1998) in the form scikit-learn ships as sklearn/datasets/data/digits.csv.gz:
// 1797 rows of 64 pixel values then the digit, comma-separated, gzip-compressed. Each image
// is 8x8 with integer values 0..16 (the number of "on" pixels in a 4x4 block of the original
// 32x32 bitmap). A small real data set for tests and examples that needs no network access
// beyond fetching one file: scripts/fetch-data.sh [DATA_DIR] (or `make data`) extracts it
// from Debian's python3-sklearn package and checks its sha256; DATA_DIR/digits.rst is its
// description (origin, authors, references).
//
// Values are the raw counts 0..16 as float32, NOT scaled to [0, 1]: divide by 16 (or
// normalise) explicitly, as with sklearn's load_digits.
//
// Errors are anvil::Error: a missing file (saying how to fetch it), malformed rows
// (path:line:column), a shape other than 1797 x 65, pixels outside 0..16 or labels outside
// 0..9.
//
// Thread-safety: immutable after construction; concurrent get() calls are safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"
#include "core/tensor/tensor.h"

namespace anvil::data {

struct DigitsOptions {
  // input as float32 [1, 8, 8] (CHW, for convolutions) instead of float32 [64].
  bool as_image = false;
};

class Digits : public Dataset {
 public:
  static constexpr int64_t kNumSamples = 1797;
  static constexpr int64_t kNumClasses = 10;

  // `path_or_data_dir`: the digits.csv.gz file, or a folder holding it (see find_digits).
  explicit Digits(const std::string& path_or_data_dir, DigitsOptions options = {});

  int64_t size() const override { return images_.size(0); }
  // input: float32 [64] or [1, 8, 8] with values 0..16; target: int64 [] digit 0..9.
  Example get(int64_t index) const override;
  std::string name() const override;

  const Tensor& images() const { return images_; }    // float32 [1797, 64] or [1797, 1, 8, 8]
  const Tensor& targets() const { return targets_; }  // int64 [1797]
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Tensor images_;
  Tensor targets_;
};

// Where data files live by default: $ANVIL_DATA_DIR when set and non-empty, else "data"
// relative to the current working directory (the source tree's data/ when run from its
// root). Reads the environment, so do not call it while another thread runs setenv.
std::string default_data_dir();

// `data_dir`/digits.csv.gz if it is a file; otherwise an error saying how to fetch it
// (scripts/fetch-data.sh `data_dir`, or make data DATA_DIR=`data_dir`).
std::string find_digits(const std::string& data_dir = default_data_dir());

}  // namespace anvil::data
