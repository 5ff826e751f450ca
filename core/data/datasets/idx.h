// The IDX format of the MNIST family (MNIST, Fashion-MNIST, KMNIST, EMNIST): a 4-byte magic
// (0x00 0x00, a type code, the number of dimensions), that many big-endian int32 sizes, then
// the elements row-major in big-endian order. Type codes: 0x08 uint8, 0x09 int8, 0x0B int16,
// 0x0C int32, 0x0D float32, 0x0E float64. Files may be gzip-compressed (as distributed);
// compression is detected from the content, so "x-ubyte" and "x-ubyte.gz" read alike.
//
// Errors are anvil::Error with a message that starts with the file's path: a missing file
// (with the system's reason), a bad magic, an unknown type code, truncated data (declared
// versus available bytes), trailing bytes after the declared data, corrupt gzip data.
//
// Thread-safety: read_idx/write_idx share no state; IdxDataset is immutable after
// construction, so concurrent get() calls are safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"
#include "core/tensor/tensor.h"

namespace anvil::data {

// The tensor stored in an IDX file, in native byte order, with the file's dtype and shape.
Tensor read_idx(const std::string& path);

// Writes `t` (dtype uint8, int8, int16, int32, float32 or float64; at most 255 dims, each
// below 2^31) as an IDX file, gzip-compressed when `gzip`. Atomic: the data goes to a
// temporary file that is renamed over `path` once complete.
void write_idx(const std::string& path, const Tensor& t, bool gzip = false);

// Images paired with class labels, from an IDX images file [N, ...] and an IDX labels file
// [N] of an integer dtype. Sample i: input = images[i] (a view in the file's dtype: uint8
// [28, 28] for MNIST), target = labels[i] as an int64 scalar. Labels must be non-negative.
// Both files are loaded whole at construction (MNIST's training set takes 47 MB).
class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path);
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;
  std::string name() const override;
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }  // int64 [N]

 private:
  std::string images_path_;
  Tensor images_;
  Tensor labels_;
};

// MNIST from `root`: train-images-idx3-ubyte / train-labels-idx1-ubyte (t10k-* when !train),
// each optionally ".gz", looked up in `root` and in `root`/MNIST/raw (torchvision's layout).
// A missing file is an error listing every path tried. Also reads Fashion-MNIST and KMNIST,
// which use the same names.
IdxDataset mnist(const std::string& root, bool train = true);

}  // namespace anvil::data
