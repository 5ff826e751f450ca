// The NCCL backend of ProcessGroup: CUDA tensors, one device per rank, NCCL from the CUDA
// toolkit loaded at run time (libnccl.so.2), so binaries start on machines without it. The
// communicator's unique id travels through the same Gloo store the CPU ranks rendezvous in.
//
// Streams: each collective runs on the group's own stream, after the work already queued on
// the caller's current stream (an event); Work::wait() makes the caller's current stream wait
// for it and, to honour the timeout, the host polls the collective's event: a collective not
// done within ProcessGroupOptions::timeout aborts the communicator (ncclCommAbort) and fails
// with CollectiveError, as PyTorch's NCCL watchdog does.
//
// Thread-safety: as ProcessGroup; collectives are queued in call order under a mutex.
#pragma once

#include <memory>
#include <mutex>

#include "core/distributed/process_group.h"

namespace gloo::rendezvous {
class Store;
}

namespace anvil::distributed {

// Whether NCCL can be used here (the library loads and a CUDA device exists); else why not.
bool nccl_available(std::string* why = nullptr);

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Joins the group on CUDA device `device` (blocks until every rank joined).
  NcclProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int size, int device,
                   ProcessGroupOptions options = {});
  ~NcclProcessGroup() override;

  const char* backend() const override { return "nccl"; }
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) override;
  std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor output, Tensor input, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;
  int64_t sequence() const override;

  struct State;

 private:
  const int device_;
  const ProcessGroupOptions options_;
  std::shared_ptr<State> state_;  // the communicator, its stream; shared with in-flight work
};

}  // namespace anvil::distributed
