// The Gloo backend: see gloo_process_group.h.
#include "core/distributed/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>

#include <cstring>
#include <sstream>

#include "core/autograd/grad_mode.h"
#include "core/distributed/flat_buffer.h"
#include "core/ops/functions.h"
#include "core/tensor/tensor.h"
#include "core/util/fault_point.h"

namespace anvil::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::string Bytes(int64_t n) {
  std::ostringstream s;
  if (n >= (1 << 20)) {
    s << static_cast<double>(n) / (1 << 20) << " MiB";
  } else if (n >= 1024) {
    s << static_cast<double>(n) / 1024 << " KiB";
  } else {
    s << n << " B";
  }
  return s.str();
}

template <typename T>
gloo::AllreduceOptions::Func ReduceFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
    case ReduceOp::kMax:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
    case ReduceOp::kMin:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
  }
  return {};
}

// Runs Gloo's allreduce over `flat` (contiguous, CPU) in place.
void AllReduceFlat(const std::shared_ptr<gloo::Context>& ctx, const Tensor& flat, ReduceOp op,
                   std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setTimeout(timeout);
  const size_t n = static_cast<size_t>(flat.numel());
  switch (flat.dtype()) {
#define ANVIL_GLOO_CASE(st, T)                           \
  case st:                                               \
    opts.setOutput(static_cast<T*>(flat.data_ptr()), n); \
    opts.setReduceFunction(ReduceFn<T>(op));             \
    break;
    ANVIL_GLOO_CASE(kFloat32, float)
    ANVIL_GLOO_CASE(kFloat64, double)
    ANVIL_GLOO_CASE(kInt32, int32_t)
    ANVIL_GLOO_CASE(kInt64, int64_t)
    ANVIL_GLOO_CASE(kUInt8, uint8_t)
#undef ANVIL_GLOO_CASE
    default:
      throw TypeError(detail::StrCat(
          "all_reduce (gloo): expected float32, float64, int32, int64 or uint8 tensors, got ", flat.dtype()));
  }
  gloo::allreduce(opts);
}

void CheckTensors(const char* what, const std::vector<Tensor>& ts, ReduceOp op = ReduceOp::kSum) {
  ANVIL_CHECK(!ts.empty(), what, ": expected at least one tensor");
  ANVIL_CHECK(op != ReduceOp::kAvg || !ts[0].defined() || is_floating_point(ts[0].dtype()), what,
              ": avg needs floating-point tensors, got ", ts[0].dtype(), "; reduce with sum and divide");
  for (size_t i = 0; i < ts.size(); ++i) {
    ANVIL_CHECK(ts[i].defined(), what, ": tensor ", i, " is undefined");
    ANVIL_CHECK(ts[i].device().is_cpu(), what, " (gloo): expected CPU tensors, tensor ", i, " is on ",
                ts[i].device().str(), "; use the nccl backend for CUDA tensors");
    ANVIL_CHECK(ts[i].dtype() == ts[0].dtype(), what, ": tensor ", i, " is ", ts[i].dtype(), ", tensor 0 is ",
                ts[0].dtype(), "; one collective reduces one dtype");
  }
}

}  // namespace

class GlooProcessGroup::GlooWork final : public Work {
 public:
  explicit GlooWork(int64_t seq) : seq_(seq) {}
  bool is_completed() const override {
    MutexLock lock(&mu_);
    return done_;
  }
  void wait() override {
    UniqueMutexLock lock(&mu_);
    while (!done_) cv_.wait(lock.native());
    if (error_) std::rethrow_exception(error_);
  }
  int64_t sequence() const override { return seq_; }
  void finish(std::exception_ptr error) {
    MutexLock lock(&mu_);
    error_ = std::move(error);
    done_ = true;
    cv_.notify_all();
  }

 private:
  const int64_t seq_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::exception_ptr error_ ABSL_GUARDED_BY(mu_);
};

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int size,
                                   GlooOptions options)
    : ProcessGroup(rank, size), options_(std::move(options)), store_(std::move(store)) {
  ANVIL_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: expected 0 <= rank < size, got rank ", rank, " of ",
              size);
  gloo::transport::tcp::attr attr;
  attr.iface = options_.ifname;
  attr.ai_family = options_.ipv6 ? AF_INET6 : AF_INET;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(detail::StrCat("gloo: cannot use interface '", options_.ifname, "' (", options_.ipv6 ? "ipv6" : "ipv4",
                               "): ", e.what()));
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  const std::chrono::milliseconds rdzv_timeout =
      options_.rendezvous_timeout.count() > 0 ? options_.rendezvous_timeout : options_.timeout;
  ctx->setTimeout(rdzv_timeout);  // collectives pass options_.timeout themselves
  const auto start = Clock::now();
  try {
    ctx->connectFullMesh(*store_, device);
  } catch (const std::exception& e) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    throw CollectiveError(detail::StrCat("rendezvous: rank ", rank, " of ", size, " could not meet every rank within ",
                                         waited, " s (timeout ", rdzv_timeout.count() / 1000.0,
                                         " s); a rank that did not start, or a store or interface the ranks do not "
                                         "share, keeps it waiting: ",
                                         e.what()),
                          "rendezvous", -1, {});
  }
  context_ = ctx;
  thread_ = std::thread([this] { Loop(); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    MutexLock lock(&mu_);
    quit_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

int64_t GlooProcessGroup::sequence() const {
  MutexLock lock(&mu_);
  return next_seq_;
}

std::shared_ptr<Work> GlooProcessGroup::Enqueue(std::string name, std::function<void()> body) {
  MutexLock lock(&mu_);
  auto work = std::make_shared<GlooWork>(next_seq_++);
  queue_.emplace_back(work, [this, work, name = std::move(name), body = std::move(body)] {
    if (broken_) return work->finish(broken_);
    const auto start = Clock::now();
    try {
      fault_point("distributed:collective");
      body();
    } catch (const Error&) {
      work->finish(std::current_exception());  // a bad argument: the group is still usable
      return;
    } catch (const std::exception& e) {
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<int> missing;
      const std::string who = MissingRanks(name, work->sequence(), &missing);
      broken_ = std::make_exception_ptr(CollectiveError(
          detail::StrCat(name, " #", work->sequence(), " failed on rank ", rank(), " of ", size(), " after ", waited,
                         " s (timeout ", options_.timeout.count() / 1000.0, " s): ", who, "; gloo: ", e.what()),
          name, work->sequence(), missing));
      work->finish(broken_);
      return;
    }
    work->finish(nullptr);
  });
  cv_.notify_all();
  return work;
}

void GlooProcessGroup::Loop() {
  while (true) {
    std::function<void()> task;
    {
      UniqueMutexLock lock(&mu_);
      while (!quit_ && queue_.empty()) cv_.wait(lock.native());
      if (queue_.empty()) return;
      task = std::move(queue_.front().second);
      queue_.pop_front();
    }
    task();
  }
}

std::string GlooProcessGroup::MissingRanks(const std::string& name, int64_t seq, std::vector<int>* missing) {
  // Every rank that fails writes where it stopped; a rank that never writes is dead, hung
  // before this collective, or cut off from the store as well as from its peers.
  const std::string mine = detail::StrCat(name, " #", seq);
  std::ostringstream out;
  try {
    store_->set("failed/" + std::to_string(rank()), std::vector<char>(mine.begin(), mine.end()));
    const auto grace = std::min<std::chrono::milliseconds>(options_.timeout / 4, std::chrono::seconds(3));
    const auto deadline = Clock::now() + grace;
    std::vector<std::string> elsewhere;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        store_->wait({"failed/" + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
        const std::vector<char> v = store_->get("failed/" + std::to_string(r));
        const std::string theirs(v.begin(), v.end());
        if (theirs != mine) elsewhere.push_back(detail::StrCat("rank ", r, " stopped at ", theirs));
      } catch (const std::exception&) {
        missing->push_back(r);
      }
    }
    if (missing->empty()) {
      out << "every rank reached it, so the transfer itself failed (a link or interface went down)";
    } else {
      out << "rank" << (missing->size() > 1 ? "s " : " ");
      for (size_t i = 0; i < missing->size(); ++i) out << (i ? ", " : "") << (*missing)[i];
      out << " did not arrive (dead, hung before it, or unreachable)";
    }
    for (const auto& e : elsewhere) out << "; " << e;
  } catch (const std::exception& e) {
    out << "the rendezvous store is unreachable too, so which ranks arrived is unknown (" << e.what() << ")";
  }
  return out.str();
}

std::shared_ptr<Work> GlooProcessGroup::all_reduce(std::vector<Tensor> tensors, ReduceOp op) {
  CheckTensors("all_reduce", tensors, op);
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.nbytes();
  const std::string name = detail::StrCat("all_reduce(", reduce_op_name(op), ", ", Bytes(bytes), ")");
  return Enqueue(name, [this, tensors = std::move(tensors), op] {
    Tensor flat = flatten_tensors(tensors);
    if (size() > 1) AllReduceFlat(context_, flat, op, options_.timeout);
    if (op == ReduceOp::kAvg) {
      NoGradGuard no_grad;
      flat.div_(static_cast<double>(size()));
    }
    unflatten_into(flat, tensors);
  });
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(std::vector<Tensor> tensors, int root) {
  CheckTensors("broadcast", tensors);
  CheckRoot(root);
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.nbytes();
  const std::string name = detail::StrCat("broadcast(root ", root, ", ", Bytes(bytes), ")");
  return Enqueue(name, [this, tensors = std::move(tensors), root] {
    const Tensor flat = flatten_tensors(tensors);
    if (size() > 1) {
      gloo::BroadcastOptions opts(context_);
      opts.setTimeout(options_.timeout);
      opts.setRoot(root);
      opts.setOutput(static_cast<uint8_t*>(flat.data_ptr()), static_cast<size_t>(flat.nbytes()));
      gloo::broadcast(opts);
    }
    unflatten_into(flat, tensors);
  });
}

std::shared_ptr<Work> GlooProcessGroup::all_gather(std::vector<Tensor> outputs, Tensor input) {
  CheckTensors("all_gather", {input});
  ANVIL_CHECK(static_cast<int>(outputs.size()) == size(), "all_gather: expected ", size(), " output tensors, got ",
              outputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    ANVIL_CHECK(outputs[r].defined() && outputs[r].sizes() == input.sizes() && outputs[r].dtype() == input.dtype(),
                "all_gather: output ", r, " must match the input (", shape_str(input.sizes()), " ", input.dtype(), ")");
  }
  const std::string name = detail::StrCat("all_gather(", Bytes(input.nbytes()), ")");
  return Enqueue(name, [this, outputs = std::move(outputs), input = std::move(input)] {
    const Tensor in = input.contiguous();
    Tensor gathered = empty({static_cast<int64_t>(size()) * in.numel()}, TensorOptions(in.dtype()));
    if (size() > 1) {
      gloo::AllgatherOptions opts(context_);
      opts.setTimeout(options_.timeout);
      opts.setInput(static_cast<uint8_t*>(in.data_ptr()), static_cast<size_t>(in.nbytes()));
      opts.setOutput(static_cast<uint8_t*>(gathered.data_ptr()), static_cast<size_t>(gathered.nbytes()));
      gloo::allgather(opts);
    } else {
      NoGradGuard no_grad;
      gathered.copy_(in.reshape({-1}));
    }
    unflatten_into(gathered, outputs);
  });
}

std::shared_ptr<Work> GlooProcessGroup::reduce_scatter(Tensor output, Tensor input, ReduceOp op) {
  CheckTensors("reduce_scatter", {output, input}, op);
  CheckScatterInput(output, input);
  const std::string name = detail::StrCat("reduce_scatter(", reduce_op_name(op), ", ", Bytes(input.nbytes()), ")");
  return Enqueue(name, [this, output = std::move(output), input = std::move(input), op] {
    const Tensor flat = input.contiguous().reshape({-1}).clone();
    if (size() > 1) AllReduceFlat(context_, flat, op, options_.timeout);
    NoGradGuard no_grad;
    Tensor mine = flat.narrow(0, rank() * output.numel(), output.numel());
    if (op == ReduceOp::kAvg) mine = mine / static_cast<double>(size());
    Tensor out = output;
    out.copy_(mine.view(output.sizes()));
  });
}

std::shared_ptr<Work> GlooProcessGroup::barrier() {
  return Enqueue("barrier", [this] {
    if (size() == 1) return;
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace anvil::distributed
