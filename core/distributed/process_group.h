// Collective communication between the rank processes of one data-parallel job, after
// torch.distributed's ProcessGroup: all_reduce, broadcast, all_gather, reduce_scatter and
// barrier over tensors, each returning a Work handle whose wait() blocks until it is done.
//
// Backends: Gloo over TCP for CPU tensors (gloo_process_group.h), NCCL for CUDA tensors
// (nccl_process_group.h). Neither protocol is Anvil's own: the wire belongs to the library.
//
// Ordering: collectives run in the order they were issued, one at a time per group, on the
// group's own communication thread; every rank must issue the same collectives in the same
// order (DistributedDataParallel guarantees that for gradients). Each collective gets a
// sequence number, the same on every rank, which failure messages name.
//
// Failures: every collective has a timeout (ProcessGroupOptions::timeout). A collective that
// times out, or whose peer died, fails with CollectiveError naming the collective, its
// sequence number, the ranks that did not arrive and the time waited; the group is then
// broken and every later collective fails with the same error. A job recovers by restarting
// all ranks with a new rendezvous attempt (anvil-run, or anvild's rank supervisor).
//
// Thread-safety: a ProcessGroup may be used from several threads; collectives are queued in
// the order the calls return. A Work handle may be waited on from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace anvil::distributed {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// A collective that did not complete: timed out, or a peer went away.
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& message, std::string collective, int64_t sequence, std::vector<int> missing_ranks)
      : Error(message), collective_(std::move(collective)), sequence_(sequence), missing_(std::move(missing_ranks)) {}
  const std::string& collective() const { return collective_; }
  int64_t sequence() const { return sequence_; }
  // Ranks that did not report reaching this collective (dead, hung earlier, or unreachable).
  const std::vector<int>& missing_ranks() const { return missing_; }

 private:
  std::string collective_;
  int64_t sequence_;
  std::vector<int> missing_;
};

// A queued collective. wait() blocks until it ran and rethrows its failure.
// Thread-safety: safe from any thread.
class Work {
 public:
  virtual ~Work();
  virtual bool is_completed() const = 0;
  // Blocks until done; rethrows the collective's error (CollectiveError, or an argument error).
  virtual void wait() = 0;
  virtual int64_t sequence() const = 0;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout =
      std::chrono::minutes(5);  // per collective (torch.distributed's default is 30 min)
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;  // "gloo" or "nccl"

  // In place on each rank's `tensors` (all on the group's device type, each contiguous):
  // several tensors are reduced as one flat buffer (kAvg divides by size() after the sum).
  virtual std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op = ReduceOp::kSum) = 0;
  // Rank `root`'s values overwrite every other rank's `tensors`.
  virtual std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root = 0) = 0;
  // outputs[r] receives rank r's `input` (size() outputs, each shaped like the input).
  virtual std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input) = 0;
  // Reduces `input` (size() * output.numel() elements) across ranks; rank r keeps chunk r.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::kSum) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

  // The number of collectives issued so far (the next one's sequence number).
  virtual int64_t sequence() const = 0;

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  // The argument checks every backend makes as a collective is issued: broadcast's root is a
  // rank of the group; reduce_scatter's input holds size() chunks of the output's size.
  void CheckRoot(int root) const;
  void CheckScatterInput(const Tensor& output, const Tensor& input) const;

 private:
  const int rank_, size_;
};

}  // namespace anvil::distributed
