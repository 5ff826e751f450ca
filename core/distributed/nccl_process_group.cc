// The NCCL backend: see nccl_process_group.h.
#include "core/distributed/nccl_process_group.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gloo/rendezvous/store.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/autograd/grad_mode.h"
#include "core/backend/cuda/runtime.h"
#include "core/distributed/flat_buffer.h"
#include "core/ops/functions.h"
#include "core/util/mutex.h"

namespace anvil::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// NCCL's entry points, resolved from libnccl.so.2 at first use.
struct NcclApi {
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  std::string error;  // why it did not load
};

const NcclApi& Api() {
  static const NcclApi api = [] {
    NcclApi a;
    void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#ifdef ANVIL_CUDA_LIBRARY_DIR
    if (lib == nullptr) lib = ::dlopen(ANVIL_CUDA_LIBRARY_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
    if (lib == nullptr) {
      a.error = "libnccl.so.2 not found (NCCL comes with the CUDA toolkit; or use the gloo backend on CPUs)";
      return a;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (fn == nullptr && a.error.empty()) a.error = std::string("libnccl.so.2 has no ") + name;
    };
    sym(a.GetUniqueId, "ncclGetUniqueId");
    sym(a.CommInitRank, "ncclCommInitRank");
    sym(a.CommDestroy, "ncclCommDestroy");
    sym(a.CommAbort, "ncclCommAbort");
    sym(a.CommGetAsyncError, "ncclCommGetAsyncError");
    sym(a.GetErrorString, "ncclGetErrorString");
    sym(a.AllReduce, "ncclAllReduce");
    sym(a.Broadcast, "ncclBroadcast");
    sym(a.AllGather, "ncclAllGather");
    sym(a.ReduceScatter, "ncclReduceScatter");
    return a;
  }();
  return api;
}

void Check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  throw Error(detail::StrCat("nccl: ", what, " failed: ", Api().GetErrorString(r)));
}

void CheckCuda(cudaError_t r, const char* what) {
  if (r == cudaSuccess) return;
  throw Error(detail::StrCat("nccl: ", what, ": ", cudaGetErrorString(r)));
}

ncclDataType_t DataType(ScalarType t) {
  switch (t) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kFloat16:
      return ncclFloat16;
    case kBFloat16:
      return ncclBfloat16;
    case kInt32:
      return ncclInt32;
    case kInt64:
      return ncclInt64;
    case kUInt8:
      return ncclUint8;
    default:
      throw TypeError(detail::StrCat("nccl: no NCCL type for ", t));
  }
}

ncclRedOp_t RedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

}  // namespace

bool nccl_available(std::string* why) {
  const NcclApi& api = Api();
  std::string reason = api.error;
  if (reason.empty() && cuda::device_count() == 0) reason = "no CUDA device: " + cuda::unavailable_reason();
  if (why != nullptr) *why = reason;
  return reason.empty();
}

struct NcclProcessGroup::State {
  ncclComm_t comm = nullptr;      // set by the constructor
  cudaStream_t stream = nullptr;  // set by the constructor
  // Serialises issuing (NCCL needs every rank's calls in one order) and aborting.
  Mutex mu;
  int64_t next_seq ABSL_GUARDED_BY(mu) = 0;
  bool aborted ABSL_GUARDED_BY(mu) = false;
  std::string abort_reason ABSL_GUARDED_BY(mu);
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclProcessGroup::State> state, int device, int64_t seq, std::string name,
           std::chrono::milliseconds timeout, int rank, int size, std::vector<Tensor> keep, std::function<void()> after)
      : state_(std::move(state)),
        device_(device),
        seq_(seq),
        name_(std::move(name)),
        timeout_(timeout),
        rank_(rank),
        size_(size),
        keep_(std::move(keep)),
        after_(std::move(after)) {
    cuda::DeviceGuard guard(device_);
    CheckCuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "event");
    CheckCuda(cudaEventRecord(done_, state_->stream), "record");
    start_ = Clock::now();
  }
  ~NcclWork() override {
    if (done_ != nullptr) cudaEventDestroy(done_);
  }
  bool is_completed() const override { return cudaEventQuery(done_) == cudaSuccess; }
  int64_t sequence() const override { return seq_; }
  void wait() override {
    cuda::DeviceGuard guard(device_);
    while (cudaEventQuery(done_) == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      Api().CommGetAsyncError(state_->comm, &async);
      const bool late = Clock::now() - start_ > timeout_;
      if (async != ncclSuccess || late) {
        MutexLock lock(&state_->mu);
        if (!state_->aborted) {
          Api().CommAbort(state_->comm);  // the watchdog's remedy: no later collective can hang on it
          state_->aborted = true;
          state_->abort_reason = detail::StrCat(
              name_, " #", seq_, " failed on rank ", rank_, " of ", size_, " after ",
              std::chrono::duration<double>(Clock::now() - start_).count(), " s (timeout ", timeout_.count() / 1000.0,
              " s): ",
              async != ncclSuccess ? std::string("nccl: ") + Api().GetErrorString(async)
                                   : std::string("a rank did not arrive (dead, hung before it, or unreachable)"));
        }
        throw CollectiveError(state_->abort_reason, name_, seq_, {});
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // The caller's stream orders after the collective (already done: the host saw it).
    CheckCuda(cudaStreamWaitEvent(cuda::current_stream(device_), done_, 0), "stream wait");
    if (after_) {
      std::function<void()> after = std::move(after_);
      after();
    }
  }

 private:
  std::shared_ptr<NcclProcessGroup::State> state_;
  int device_;
  int64_t seq_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  int rank_, size_;
  std::vector<Tensor> keep_;  // alive until the collective is done
  std::function<void()> after_;
  cudaEvent_t done_ = nullptr;
  Clock::time_point start_;
};

void CheckCudaTensors(const char* what, const std::vector<Tensor>& ts, int device) {
  ANVIL_CHECK(!ts.empty(), what, ": expected at least one tensor");
  for (size_t i = 0; i < ts.size(); ++i) {
    ANVIL_CHECK(ts[i].defined() && ts[i].device().is_cuda() && ts[i].device().index == device, what, " (nccl): tensor ",
                i, " must be on cuda:", device, ", got ",
                ts[i].defined() ? ts[i].device().str() : std::string("undefined"));
    ANVIL_CHECK(ts[i].dtype() == ts[0].dtype(), what, ": tensor ", i, " is ", ts[i].dtype(), ", tensor 0 is ",
                ts[0].dtype());
  }
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int size, int device,
                                   ProcessGroupOptions options)
    : ProcessGroup(rank, size), device_(device), options_(options), state_(std::make_shared<State>()) {
  std::string why;
  ANVIL_CHECK(nccl_available(&why), "the nccl backend is not usable here: ", why);
  ANVIL_CHECK(device >= 0 && device < cuda::device_count(), "nccl: cuda:", device, " does not exist (",
              cuda::device_count(), " devices)");
  ncclUniqueId id;
  if (rank == 0) {
    Check(Api().GetUniqueId(&id), "ncclGetUniqueId");
    store->set("nccl_unique_id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    store->wait({"nccl_unique_id"}, options_.timeout);
    const std::vector<char> bytes = store->get("nccl_unique_id");
    ANVIL_CHECK(bytes.size() == sizeof(id.internal), "nccl: a malformed unique id in the store");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  cuda::DeviceGuard guard(device);
  Check(Api().CommInitRank(&state_->comm, size, id, rank), "ncclCommInitRank");
  CheckCuda(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), "stream");
}

NcclProcessGroup::~NcclProcessGroup() {
  cuda::DeviceGuard guard(device_);
  if (state_->stream != nullptr) cudaStreamSynchronize(state_->stream);
  if (state_->comm != nullptr) {
    if (state_->aborted) {
      // ncclCommAbort already freed it.
    } else {
      Api().CommDestroy(state_->comm);
    }
  }
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

int64_t NcclProcessGroup::sequence() const {
  MutexLock lock(&state_->mu);
  return state_->next_seq;
}

namespace {

// Queues `launch` on the group's stream after the caller's current stream's work.
template <typename F>
std::shared_ptr<Work> Issue(const std::shared_ptr<NcclProcessGroup::State>& state, int device, int rank, int size,
                            std::chrono::milliseconds timeout, std::string name, std::vector<Tensor> keep, F launch,
                            std::function<void()> after = {}) {
  cuda::DeviceGuard guard(device);
  MutexLock lock(&state->mu);
  if (state->aborted) throw CollectiveError(state->abort_reason, name, state->next_seq, {});
  cudaEvent_t ready;
  CheckCuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "event");
  CheckCuda(cudaEventRecord(ready, cuda::current_stream(device)), "record");
  CheckCuda(cudaStreamWaitEvent(state->stream, ready, 0), "stream wait");
  cudaEventDestroy(ready);
  launch(state->comm, state->stream);
  const int64_t seq = state->next_seq++;
  return std::make_shared<NcclWork>(state, device, seq, std::move(name), timeout, rank, size, std::move(keep),
                                    std::move(after));
}

}  // namespace

std::shared_ptr<Work> NcclProcessGroup::all_reduce(std::vector<Tensor> tensors, ReduceOp op) {
  CheckCudaTensors("all_reduce", tensors, device_);
  const Tensor flat = flatten_tensors(tensors);
  std::function<void()> copy_back;
  if (!(tensors.size() == 1 && flat.impl_ptr() == tensors[0].impl_ptr())) {
    copy_back = [flat, tensors] { unflatten_into(flat, tensors); };
  }
  const auto type = DataType(flat.dtype());
  const size_t n = static_cast<size_t>(flat.numel());
  return Issue(
      state_, device_, rank(), size(), options_.timeout, detail::StrCat("all_reduce(", reduce_op_name(op), ")"), {flat},
      [&](ncclComm_t comm, cudaStream_t s) {
        Check(Api().AllReduce(flat.data_ptr(), flat.data_ptr(), n, type, RedOp(op), comm, s), "ncclAllReduce");
      },
      copy_back);
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(std::vector<Tensor> tensors, int root) {
  CheckCudaTensors("broadcast", tensors, device_);
  CheckRoot(root);
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& t : tensors) {
    ANVIL_CHECK(t.is_contiguous(), "broadcast (nccl): expected contiguous tensors");
    const size_t bytes = static_cast<size_t>(t.nbytes());
    works.push_back(Issue(
        state_, device_, rank(), size(), options_.timeout, "broadcast", {t}, [&](ncclComm_t comm, cudaStream_t s) {
          Check(Api().Broadcast(t.data_ptr(), t.data_ptr(), bytes, ncclUint8, root, comm, s), "ncclBroadcast");
        }));
  }
  return works.back();  // issued in order on one stream: the last one done means all are
}

std::shared_ptr<Work> NcclProcessGroup::all_gather(std::vector<Tensor> outputs, Tensor input) {
  CheckCudaTensors("all_gather", {input}, device_);
  ANVIL_CHECK(static_cast<int>(outputs.size()) == size(), "all_gather: expected ", size(), " outputs, got ",
              outputs.size());
  const Tensor in = input.contiguous();
  Tensor gathered =
      empty({static_cast<int64_t>(size()) * in.numel()}, TensorOptions(in.dtype()).with_device(in.device()));
  const size_t bytes = static_cast<size_t>(in.nbytes());
  return Issue(
      state_, device_, rank(), size(), options_.timeout, "all_gather", {in, gathered},
      [&](ncclComm_t comm, cudaStream_t s) {
        Check(Api().AllGather(in.data_ptr(), gathered.data_ptr(), bytes, ncclUint8, comm, s), "ncclAllGather");
      },
      [gathered, outputs] { unflatten_into(gathered, outputs); });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(Tensor output, Tensor input, ReduceOp op) {
  CheckCudaTensors("reduce_scatter", {output, input}, device_);
  CheckScatterInput(output, input);
  ANVIL_CHECK(output.is_contiguous(), "reduce_scatter (nccl): expected a contiguous output");
  const Tensor in = input.contiguous();
  const size_t n = static_cast<size_t>(output.numel());
  const auto type = DataType(in.dtype());
  return Issue(
      state_, device_, rank(), size(), options_.timeout, detail::StrCat("reduce_scatter(", reduce_op_name(op), ")"),
      {in, output}, [&](ncclComm_t comm, cudaStream_t s) {
        Check(Api().ReduceScatter(in.data_ptr(), output.data_ptr(), n, type, RedOp(op), comm, s), "ncclReduceScatter");
      });
}

std::shared_ptr<Work> NcclProcessGroup::barrier() {
  Tensor one = ones({1}, TensorOptions(kFloat32).with_device(Device(DeviceType::CUDA, device_)));
  return all_reduce({one}, ReduceOp::kSum);
}

}  // namespace anvil::distributed
