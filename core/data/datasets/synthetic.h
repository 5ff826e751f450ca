// Synthetic datasets for tests, examples and benchmarks, after sklearn.datasets.make_* and
// torchvision's FakeData. Every value is a pure function of (seed, sample index) through
// Philox (core/data/philox_stream.h): the same arguments give the same data on every run,
// machine and thread count, and sample i does not depend on how many samples came before.
//
// Errors: anvil::Error for invalid sizes (negative counts, no classes, negative spread).
// Thread-safety: the functions share no state; RandomImages is immutable, so concurrent
// get() calls are safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"
#include "core/tensor/tensor.h"

namespace anvil::data {

// The cluster centers make_blobs uses: float32 [num_classes, num_features], each coordinate
// uniform in (-10, 10) as sklearn's default center_box.
Tensor blob_centers(int64_t num_classes, int64_t num_features, uint64_t seed);

// Gaussian blobs: sample i has class i % num_classes (so classes are balanced, sizes
// differing by at most one) and input = center[class] + cluster_std * N(0, I).
// input float32 [num_features], target int64 [].
TensorDataset make_blobs(int64_t n, int64_t num_classes, int64_t num_features, double cluster_std, uint64_t seed);

// Interleaved spirals in the plane: class k's arm starts at the origin at angle 2*pi*k/K and
// makes one full turn out to radius 1; sample i has class i % K and lies at an even spacing
// along its arm, plus Gaussian noise of standard deviation `noise` in each coordinate. Not
// linearly separable: a quick test that a model learns a nonlinear boundary.
// input float32 [2], target int64 [].
TensorDataset make_spirals(int64_t n, int64_t num_classes, double noise, uint64_t seed);

// A lazy dataset of random images, like torchvision's FakeData: get(i) generates a smooth
// random uint8 image [h, w, c] (a coarse random grid bilinearly upsampled, plus pixel noise)
// from Philox keyed by (seed, i), with target i % num_classes. Holds no sample data, so it
// stands in for a large image set in loader and throughput tests.
class RandomImages : public Dataset {
 public:
  RandomImages(int64_t n, int64_t height, int64_t width, int64_t channels, int64_t num_classes, uint64_t seed);
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override;
  std::string name() const override;

 private:
  int64_t n_, height_, width_, channels_, num_classes_;
  uint64_t seed_;
};

}  // namespace anvil::data
