// The Gloo backend of ProcessGroup: CPU tensors over Gloo's TCP transport (Debian's
// libgloo), rendezvous through a Gloo store. Collectives run on one communication thread
// per group, in issue order, so a backward pass keeps computing while a bucket is reduced.
//
// Algorithms: Gloo's ring all_reduce, its broadcast, all_gather and barrier. reduce_scatter
// is an all_reduce whose rank-r chunk is kept (Gloo has no unbound-buffer reduce-scatter);
// kAvg is the sum divided by size() in the tensor's dtype, as NCCL's avg.
//
// Thread-safety: as ProcessGroup (any thread may issue; one thread runs the collectives).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/distributed/process_group.h"
#include "core/util/mutex.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace anvil::distributed {

struct GlooOptions : ProcessGroupOptions {
  std::string ifname = "lo";  // the interface to bind (environment.h says why it is explicit)
  bool ipv6 = false;
  // How long the constructor waits for every rank; 0: `timeout`.
  std::chrono::milliseconds rendezvous_timeout{0};
};

class GlooProcessGroup final : public ProcessGroup {
 public:
  // Joins the group: blocks until all `size` ranks met in `store` or options.timeout passed.
  GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int size, GlooOptions options = {});
  ~GlooProcessGroup() override;

  const char* backend() const override { return "gloo"; }
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) override;
  std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor output, Tensor input, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;
  int64_t sequence() const override;

  class GlooWork;

 private:
  // Queues `body` as collective `name`; its failure becomes a CollectiveError.
  std::shared_ptr<Work> Enqueue(std::string name, std::function<void()> body) ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // After a failure of collective `name` #seq: reports this rank's position in the store and
  // returns the ranks that did not report theirs within a short grace period.
  std::string MissingRanks(const std::string& name, int64_t seq, std::vector<int>* missing);

  const GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::Context> context_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<GlooWork>, std::function<void()>>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::exception_ptr broken_;  // the first failure; later collectives fail with it (comm thread only)
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace anvil::distributed
