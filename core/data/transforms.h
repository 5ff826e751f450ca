// Image/array transforms for the data pipeline, after torchvision.transforms: each maps one
// sample tensor to another and can be chained with Compose. Layout convention: ToTensor turns
// an HWC (or HW) array into CHW float32; every later transform works on CHW, or on a batch
// (N)CHW where stated, and the spatial transforms act on the last two dims (..., H, W).
//
// ToTensor pitfall (the reason it exists): it divides by 255 ONLY when the input is uint8.
// Any other dtype — int16/int32 multi-band satellite bands with values in the thousands,
// float reflectances already in [0, 1] — keeps its values: the result is the same numbers as
// float32 with the layout changed. Rescaling such data is an explicit choice: use BandScale
// or Normalize with statistics of the actual data, never an implicit /255.
//
// Randomness: random transforms draw from counter-based Philox keyed by an explicit seed. The
// n-th call (0-based, since construction or the last set_seed) uses philox4x32(seed, n), so
// an augmentation sequence is a pure function of (seed, call index): reproducible across runs
// and processes, and independent of the global generator (anvil::manual_seed).
//
// Inside a DataLoader the draws come from the sample's own stream instead (keyed by the
// loader's seed, the epoch, and the sample's place in its batch; see sample_random.h), so
// augmentation is identical for any number of workers and the call counter does not advance.
//
// Thread-safety: the deterministic transforms are immutable, so concurrent calls are safe.
// Random transforms advance an atomic call counter, so concurrent calls are safe and each call
// gets a distinct index, but which caller gets which index depends on scheduling; for
// per-sample reproducibility under threads, give each worker its own instance (or its own
// seed). set_seed() must not run concurrently with calls on the same instance.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::data {

// One step of a pipeline: a function from a sample tensor to a new tensor.
class Transform {
 public:
  virtual ~Transform();
  virtual Tensor operator()(const Tensor& x) const = 0;
  // A short description for logs, e.g. "Normalize(mean=[0.5], std=[0.25])".
  virtual std::string name() const = 0;
};

// Applies its transforms in order: Compose({a, b})(x) == b(a(x)). An empty Compose is the
// identity (it returns x itself).
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<Transform>> transforms);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;
  const std::vector<std::shared_ptr<Transform>>& transforms() const { return transforms_; }

 private:
  std::vector<std::shared_ptr<Transform>> transforms_;
};

// Wraps an arbitrary function; `name` is what name() reports.
class Lambda : public Transform {
 public:
  Lambda(std::function<Tensor(const Tensor&)> fn, std::string name = "Lambda");
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override { return name_; }

 private:
  std::function<Tensor(const Tensor&)> fn_;
  std::string name_;
};

// HWC -> CHW float32 (HW -> 1xHxW). Divides by 255 only for uint8 input; every other dtype
// keeps its values (see the pitfall above). Always returns a new contiguous tensor.
class ToTensor : public Transform {
 public:
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override { return "ToTensor"; }
};

// (x[c] - mean[c]) / std[c] per channel, on CHW or NCHW floating-point input. The channel
// count must equal mean.size() == std.size(), and no std may be zero.
class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;

 private:
  std::vector<double> mean_, std_;
};

// x[c] * scale[c] + offset[c] per band, on CHW or NCHW input: the usual way to turn raw
// digital numbers of multi-band sensors into reflectance (e.g. scale 1e-4, offset 0).
// Integer input is converted to float32 first; floating input keeps its dtype.
class BandScale : public Transform {
 public:
  BandScale(std::vector<double> scale, std::vector<double> offset);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;

 private:
  std::vector<double> scale_, offset_;
};

// Base of the random transforms: holds the seed and the call counter described above.
class RandomTransform : public Transform {
 public:
  explicit RandomTransform(uint64_t seed) : seed_(seed) {}
  // Re-keys the stream and restarts at call index 0.
  void set_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  // The index the next call will use; set it to replay or skip ahead.
  uint64_t call_index() const { return calls_.load(); }
  void set_call_index(uint64_t index) { calls_.store(index); }

 protected:
  // The Philox block of the next call, advancing the counter.
  std::array<uint32_t, 4> NextDraw() const;

 private:
  uint64_t seed_;
  mutable std::atomic<uint64_t> calls_{0};
};

// Reverses the last (W) dim with probability p.
class RandomHorizontalFlip : public RandomTransform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5, uint64_t seed = 0);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;

 private:
  double p_;
};

// The centred h x w window of the last two dims. Where the margin is odd, the extra row or
// column is dropped on the side torchvision drops it: top = round((H - h) / 2) with round
// half to even. The crop must fit inside the input.
class CenterCrop : public Transform {
 public:
  CenterCrop(int64_t h, int64_t w);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;

 private:
  int64_t h_, w_;
};

// A uniformly random h x w window of the last two dims, after zero-padding each side of H and
// W by `padding`. Every window position is equally likely.
class RandomCrop : public RandomTransform {
 public:
  RandomCrop(int64_t h, int64_t w, int64_t padding = 0, uint64_t seed = 0);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;

 private:
  int64_t h_, w_, padding_;
};

// Bilinear resize of the last two dims (..., H, W), like torchvision's Resize on tensors with
// antialias=False and PyTorch's interpolate(mode="bilinear", align_corners=False): output
// pixel centres map to input coordinates (y + 0.5) * H_in / H_out - 0.5, clamped at 0.
// Resize(h, w) gives exactly h x w; Resize(size) scales the shorter side to `size` and the
// longer one to floor(size * long / short), keeping the aspect ratio. Floating input keeps its
// dtype; integer input is interpolated in float32 and rounded half to even back to its dtype.
class Resize : public Transform {
 public:
  Resize(int64_t h, int64_t w);
  explicit Resize(int64_t shorter_side);
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;

 private:
  int64_t h_ = 0, w_ = 0, shorter_ = 0;  // shorter_ > 0: the one-number form
};

// With probability p, overwrites one random rectangle of a CHW (or ..., C, H, W) tensor, as
// torchvision's RandomErasing (Zhong et al., 2017): the rectangle's area is a uniform fraction
// of H*W in `scale`, its aspect ratio log-uniform in `ratio`; up to 10 tries to find one that
// fits, else the input is returned unchanged. The rectangle is filled with `value` (one number,
// or one per channel), or with standard-normal noise when random_value. Returns a new tensor.
class RandomErasing : public RandomTransform {
 public:
  struct Options {
    double p = 0.5;
    std::pair<double, double> scale{0.02, 0.33};
    std::pair<double, double> ratio{0.3, 3.3};
    std::vector<double> value{0.0};
    bool random_value = false;
  };
  explicit RandomErasing(Options options, uint64_t seed = 0);
  RandomErasing() : RandomErasing(Options{}) {}
  Tensor operator()(const Tensor& x) const override;
  std::string name() const override;
  // The rectangle (top, left, height, width) the next call on an H x W input would erase, or
  // height 0 for none; advances the stream exactly as a call does. For tests and debugging.
  std::array<int64_t, 4> NextRectangle(int64_t H, int64_t W) const;

 private:
  Options options_;
};

}  // namespace anvil::data
