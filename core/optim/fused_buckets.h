// The parameters of one fused optimizer call: the fused kernels take one device and one dtype,
// and one value of whatever else the step depends on per parameter (`key`: SGD's "momentum
// buffers are new"). Buckets keep the order parameters were added in.
// Thread-safety: none; buckets belong to one optimizer (one training thread).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/ops/foreach.h"
#include "core/ops/functions.h"
#include "core/optim/optimizer.h"
#include "core/tensor/tensor.h"

namespace anvil::optim {

struct FusedBucket {
  Device device;
  ScalarType dtype;
  int64_t key;
  // params, grads, then the optimizer's state lists; unused lists stay empty.
  std::array<std::vector<Tensor>, 6> lists;

  FusedBucket& add(const Tensor& p, const Tensor& g, const Tensor& s0 = {}, const Tensor& s1 = {},
                   const Tensor& s2 = {}, const Tensor& s3 = {}) {
    lists[0].push_back(p);
    lists[1].push_back(g);
    if (s0.defined()) lists[2].push_back(s0);
    if (s1.defined()) lists[3].push_back(s1);
    if (s2.defined()) lists[4].push_back(s2);
    if (s3.defined()) lists[5].push_back(s3);
    return *this;
  }
};

class FusedBuckets {
 public:
  // The bucket for p's device and dtype and `key`, created on first use.
  FusedBucket& bucket_for(const Tensor& p, int64_t key) {
    for (FusedBucket& b : buckets_) {
      if (b.device == p.device() && b.dtype == p.dtype() && b.key == key) return b;
    }
    buckets_.push_back(FusedBucket{p.device(), p.dtype(), key, {}});
    return buckets_.back();
  }
  // A parameter whose step count lives on its device (Adam's and RMSprop's fused paths): p, its
  // gradient and its state tensors (undefined ones left out, as add() does) into the bucket of
  // key 0, followed by the count, copied to the device on first use (a copy, not a read: the
  // count moves there once). False, adding nothing, when a state tensor is not one the fused
  // kernels take.
  bool add_counted_on_device(const Tensor& p, const Tensor& g, ParamState& s, const Tensor& s0, const Tensor& s1,
                             const Tensor& s2) {
    for (const Tensor* state : {&s0, &s1, &s2}) {
      if (state->defined() && !fused_step_supported(p, *state)) return false;
    }
    if (!s.device_step.defined()) {
      s.device_step = tensor(std::vector<double>{static_cast<double>(s.step), 0.0, 0.0}).to(p.device());
    }
    bucket_for(p, 0).add(p, g, s0, s1, s2, s.device_step);
    return true;
  }
  std::vector<FusedBucket>::const_iterator begin() const { return buckets_.begin(); }
  std::vector<FusedBucket>::const_iterator end() const { return buckets_.end(); }

 private:
  std::vector<FusedBucket> buckets_;
};

}  // namespace anvil::optim
