// DistributedDataParallel, after torch.nn.parallel.DistributedDataParallel and its reducer:
// every rank holds a replica of the module, runs it on its own shard of the batch, and the
// gradients are averaged across ranks during backward, so each optimizer step sees the
// gradient of the global batch.
//
// - Construction checks that every rank registered the same parameters with the same shapes
//   (an error names the first that differs and the ranks' shapes), then broadcasts rank 0's
//   parameters and buffers.
// - Buckets: parameters in reverse registration order (the order backward produces their
//   gradients), the first bucket capped at 1 MiB so the first all-reduce starts early, the
//   others at 25 MiB. A bucket holds one dtype.
// - A bucket is all-reduced (avg) as soon as its last gradient was accumulated (a post-
//   accumulate hook on each parameter), on the group's communication thread while backward
//   goes on; buckets are launched strictly in bucket order, so every rank issues the same
//   collectives in the same order. The end of backward (an engine callback) waits for the
//   reductions; each parameter's .grad is then a view of its bucket (PyTorch's
//   gradient_as_bucket_view: no copy back; a .grad kept across steps changes with the bucket).
// - no_sync(): backward only accumulates locally (gradient accumulation); the next synced
//   backward reduces the accumulated gradients.
// - Unused parameters: by default a parameter that got no gradient in a synced backward is an
//   error naming it (the other ranks would wait for its bucket forever). With
//   find_unused_parameters the forward's graph is walked to find them; they count as ready
//   with a zero contribution, and a parameter unused on every rank keeps its .grad as it was
//   (a used-map all-reduce decides, as PyTorch's).
// - Buffers (BatchNorm's running statistics): broadcast from rank 0 before each training
//   forward (PyTorch's broadcast_buffers=True); SyncBatchNorm is not provided.
// - Shared parameters are one tensor, reported once by Module::parameters, reduced once.
//
// Thread-safety: none; one training thread uses it (the communication thread touches only
// the bucket buffers it was handed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/distributed/process_group.h"
#include "core/nn/module.h"

namespace anvil::distributed {

struct DdpOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;
  int64_t bucket_bytes = int64_t{25} << 20;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
};

class DistributedDataParallel final : public nn::Module {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DdpOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& input) override;

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  ProcessGroup& group() const { return *group_; }
  const std::shared_ptr<ProcessGroup>& group_ptr() const { return group_; }

  // Disables gradient synchronisation while alive (torch's `with ddp.no_sync():`).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  bool sync_enabled() const { return sync_; }
  // Averages every parameter's .grad across ranks now, bucket by bucket (a trailing
  // accumulation that ran entirely under no_sync); a missing .grad counts as zeros.
  void reduce_gradients();

  // The parameter names of each bucket, in bucket (launch) order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // Buckets all-reduced so far (a test sees the overlap and no_sync through it).
  int64_t buckets_reduced() const { return buckets_reduced_; }
  // Buckets whose all-reduce was launched while a later bucket still waited for gradients (the
  // reduction could overlap the rest of backward).
  int64_t buckets_launched_during_backward() const { return launched_early_; }
  // Seconds the training thread has spent blocked on this wrapper's collectives (the buffer
  // broadcast before a forward, the bucket reductions at the end of backward), summed since
  // construction. A rank that waits there is waiting for the slowest rank (or the network):
  // its step time without this is its own compute (the doctor's STRAGGLER_RANK). On NCCL a
  // wait only orders streams, so the host sees almost none of it.
  double collective_wait_seconds() const { return collective_wait_seconds_; }

  struct Bucket;

 private:
  void BuildBuckets();
  void OnGradientReady(size_t param_index);
  void LaunchReadyBuckets();
  void Finalize();
  // work->wait(), timed into collective_wait_seconds_.
  void Wait(Work& work);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DdpOptions options_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::vector<size_t> bucket_of_;  // param index -> bucket
  std::vector<std::unique_ptr<Bucket>> buckets_;
  bool sync_ = true;
  // One synced backward's state, armed by forward().
  bool armed_ = false;
  bool finalize_queued_ = false;
  std::vector<char> ready_;  // param index -> gradient accumulated this backward
  std::vector<char> used_;   // param index -> reached by this forward's graph
  size_t next_launch_ = 0;
  int64_t buckets_reduced_ = 0, launched_early_ = 0;
  double collective_wait_seconds_ = 0;
};

// Rank agreement: every rank hashes each parameter's bytes and the hashes are gathered. A
// parameter whose hash differs between ranks fails with RankDivergenceError naming it, the
// ranks holding each value and the largest difference; silent divergence (a rank whose
// weights drifted while the loss still looks fine) becomes loud.
class RankDivergenceError : public Error {
 public:
  RankDivergenceError(const std::string& message, std::string parameter)
      : Error(message), parameter_(std::move(parameter)) {}
  const std::string& parameter() const { return parameter_; }

 private:
  std::string parameter_;
};

// Checks that every rank holds the same parameters (bitwise); `step` is named in the error.
// A collective on every rank: all ranks must call it at the same step.
void check_rank_agreement(const nn::Module& module, ProcessGroup& group, int64_t step);

}  // namespace anvil::distributed
