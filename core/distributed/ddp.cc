// DistributedDataParallel's reducer: see ddp.h.
#include "core/distributed/ddp.h"

#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/ops/functions.h"

namespace anvil::distributed {

struct DistributedDataParallel::Bucket {
  ScalarType dtype = kFloat32;
  std::vector<size_t> params;    // indices into params_
  std::vector<int64_t> offsets;  // element offset of each in `flat`
  int64_t numel = 0;
  int pending = 0;             // gradients still to arrive this backward
  Tensor flat;                 // the reduced buffer
  std::shared_ptr<Work> work;  // this backward's all-reduce, once launched
};

namespace {

// Every rank's rows of `local` (n int64 values each), gathered.
std::vector<std::vector<int64_t>> GatherRows(ProcessGroup& group, const std::vector<int64_t>& local) {
  Tensor in = tensor(local);
  std::vector<Tensor> outs;
  for (int r = 0; r < group.size(); ++r)
    outs.push_back(empty({static_cast<int64_t>(local.size())}, TensorOptions(kInt64)));
  group.all_gather(outs, in)->wait();
  std::vector<std::vector<int64_t>> rows;
  for (const Tensor& t : outs) rows.push_back(t.to_vector<int64_t>());
  return rows;
}

// Per parameter: the number of dimensions then up to 6 sizes (the rest folded into a hash).
constexpr int kShapeWords = 8;
std::vector<int64_t> ShapeRow(const Tensor& t) {
  std::vector<int64_t> row(kShapeWords, -1);
  row[0] = t.dim();
  uint64_t h = 1469598103934665603ull;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < kShapeWords - 2) row[1 + d] = t.size(d);
    h = (h ^ static_cast<uint64_t>(t.size(d))) * 1099511628211ull;
  }
  row[kShapeWords - 1] = static_cast<int64_t>(h ^ static_cast<uint64_t>(t.dtype()));
  return row;
}

std::string Ranks(const std::vector<int>& rs) {
  std::string s;
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
  return (rs.size() > 1 ? "ranks " : "rank ") + s;
}

// Checks every rank registered the same parameters (count, then shape and dtype of each).
void VerifyShapes(ProcessGroup& group, const std::vector<std::string>& names, const std::vector<Tensor>& params) {
  const auto counts = GatherRows(group, {static_cast<int64_t>(params.size())});
  for (int r = 0; r < group.size(); ++r) {
    ANVIL_CHECK(counts[r][0] == counts[0][0], "DistributedDataParallel: rank ", r, " has ", counts[r][0],
                " parameters, rank 0 has ", counts[0][0], "; every rank must build the same model");
  }
  std::vector<int64_t> local;
  for (const Tensor& p : params) {
    const auto row = ShapeRow(p);
    local.insert(local.end(), row.begin(), row.end());
  }
  if (local.empty()) return;
  const auto rows = GatherRows(group, local);
  for (size_t i = 0; i < params.size(); ++i) {
    for (int r = 1; r < group.size(); ++r) {
      bool same = true;
      for (int w = 0; w < kShapeWords; ++w) same = same && rows[r][i * kShapeWords + w] == rows[0][i * kShapeWords + w];
      if (same) continue;
      auto shape_of = [&](int rank) {
        std::ostringstream s;
        const int64_t nd = rows[rank][i * kShapeWords];
        s << "[";
        for (int64_t d = 0; d < nd && d < kShapeWords - 2; ++d)
          s << (d ? ", " : "") << rows[rank][i * kShapeWords + 1 + d];
        s << (nd > kShapeWords - 2 ? ", ...]" : "]");
        return s.str();
      };
      throw Error(detail::StrCat("DistributedDataParallel: parameter '", names[i], "' has shape ", shape_of(0), " (",
                                 params[i].dtype(), " here) on rank 0 but ", shape_of(r), " on rank ", r,
                                 " (or another dtype); every rank must build the same model"));
    }
  }
}

// Broadcasts `tensors` from rank 0, one collective per dtype.
void BroadcastFromRankZero(ProcessGroup& group, const std::vector<Tensor>& tensors) {
  std::vector<ScalarType> dtypes;
  for (const Tensor& t : tensors) {
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) dtypes.push_back(t.dtype());
  }
  for (ScalarType dt : dtypes) {
    std::vector<Tensor> same;
    for (const Tensor& t : tensors) {
      if (t.dtype() == dt && t.numel() > 0) same.push_back(t);
    }
    if (!same.empty()) group.broadcast(same, 0)->wait();
  }
}

// Copies each parameter's .grad into its bucket: zeros for a parameter without one, or (with
// `used`) one this step's graph did not reach.
void FillBucket(DistributedDataParallel::Bucket& b, const std::vector<Tensor>& params, const std::vector<char>* used) {
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Tensor& p = params[b.params[j]];
    Tensor dst = b.flat.narrow(0, b.offsets[j], p.numel());
    const Tensor g = p.grad();
    if (g.defined() && (used == nullptr || (*used)[b.params[j]])) {
      dst.copy_(g.reshape({-1}));
    } else {
      dst.zero_();
    }
  }
}

// Makes each parameter's .grad a view of its reduced bucket (PyTorch's gradient_as_bucket_view:
// no copy back; a later backward without zero_grad accumulates into it, and the next fill
// copies it onto itself); with `keep`, the parameters it marks false keep their .grad.
void AdoptBucket(DistributedDataParallel::Bucket& b, const std::vector<Tensor>& params, const std::vector<char>* keep) {
  for (size_t j = 0; j < b.params.size(); ++j) {
    if (keep != nullptr && !(*keep)[b.params[j]]) continue;
    Tensor p = params[b.params[j]];
    p.set_grad(b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes()));
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DdpOptions options)
    : nn::Module("DistributedDataParallel"), module_(std::move(module)), group_(std::move(group)), options_(options) {
  ANVIL_CHECK(module_ != nullptr && group_ != nullptr, "DistributedDataParallel: a module and a group are required");
  ANVIL_CHECK(options_.first_bucket_bytes > 0 && options_.bucket_bytes > 0,
              "DistributedDataParallel: bucket sizes must be positive");
  register_module("module", module_);
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    ANVIL_CHECK(p.device().type == (std::string(group_->backend()) == "nccl" ? DeviceType::CUDA : DeviceType::CPU),
                "DistributedDataParallel: parameter '", name, "' is on ", p.device().str(), ", the ", group_->backend(),
                " group reduces ", std::string(group_->backend()) == "nccl" ? "CUDA" : "CPU", " tensors");
    names_.push_back(name);
    params_.push_back(p);
  }
  VerifyShapes(*group_, names_, params_);
  {
    NoGradGuard no_grad;
    std::vector<Tensor> state = module_->parameters();
    for (const Tensor& b : module_->buffers()) state.push_back(b);
    BroadcastFromRankZero(*group_, state);
  }
  BuildBuckets();
  ready_.assign(params_.size(), 0);
  used_.assign(params_.size(), 1);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { OnGradientReady(i); });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  // In-flight reductions write into our buckets: let them finish (errors were or will be
  // reported by the backward that launched them).
  for (auto& b : buckets_) {
    if (!b->work) continue;
    try {
      b->work->wait();
    } catch (...) {
    }
  }
}

void DistributedDataParallel::BuildBuckets() {
  bucket_of_.assign(params_.size(), 0);
  int64_t cap = options_.first_bucket_bytes;
  for (size_t k = params_.size(); k-- > 0;) {  // reverse registration order
    const Tensor& p = params_[k];
    const int64_t bytes = p.nbytes();
    Bucket* cur = buckets_.empty() ? nullptr : buckets_.back().get();
    const bool fits = cur != nullptr && cur->dtype == p.dtype() &&
                      (cur->numel * static_cast<int64_t>(itemsize(cur->dtype)) + bytes <= cap || cur->numel == 0);
    if (!fits) {
      if (cur != nullptr) cap = options_.bucket_bytes;
      buckets_.push_back(std::make_unique<Bucket>());
      cur = buckets_.back().get();
      cur->dtype = p.dtype();
    }
    cur->params.push_back(k);
    cur->offsets.push_back(cur->numel);
    cur->numel += p.numel();
    bucket_of_[k] = buckets_.size() - 1;
  }
  for (auto& b : buckets_)
    b->flat = zeros({b->numel}, TensorOptions(b->dtype).with_device(params_[b->params[0]].device()));
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t i : b->params) out.back().push_back(names_[i]);
  }
  return out;
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  const bool training = is_training() && GradMode::is_enabled();
  if (training && options_.broadcast_buffers && group_->size() > 1) {
    NoGradGuard no_grad;
    const auto start = std::chrono::steady_clock::now();
    BroadcastFromRankZero(*group_, module_->buffers());
    collective_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  Tensor out = module_->forward(input);
  if (!training || !sync_) return out;
  // Arm one synced backward.
  armed_ = true;
  finalize_queued_ = false;
  next_launch_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(used_.begin(), used_.end(), 1);
  if (options_.find_unused_parameters) {
    // Parameters the output's graph does not reach get no gradient this time.
    absl::flat_hash_set<const TensorImpl*> reached;
    absl::flat_hash_set<const autograd::Node*> seen;
    std::vector<autograd::Node*> stack;
    if (auto fn = out.grad_fn()) stack.push_back(fn.get());
    while (!stack.empty()) {
      autograd::Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      if (auto* acc = dynamic_cast<autograd::AccumulateGrad*>(n)) reached.insert(acc->leaf().get());
      for (const auto& e : n->next_edges()) {
        if (e.fn) stack.push_back(e.fn.get());
      }
    }
    for (size_t i = 0; i < params_.size(); ++i) used_[i] = reached.count(params_[i].impl_ptr().get()) ? 1 : 0;
  }
  for (auto& b : buckets_) {
    b->pending = 0;
    for (size_t i : b->params) b->pending += used_[i] ? 1 : 0;
  }
  return out;
}

void DistributedDataParallel::OnGradientReady(size_t i) {
  if (!armed_ || !sync_) return;
  if (!finalize_queued_) {
    finalize_queued_ = true;
    autograd::queue_callback([this] { Finalize(); });
  }
  if (ready_[i] || !used_[i]) return;
  ready_[i] = 1;
  --buckets_[bucket_of_[i]]->pending;
  LaunchReadyBuckets();
}

void DistributedDataParallel::LaunchReadyBuckets() {
  NoGradGuard no_grad;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_++];
    FillBucket(b, params_, &used_);
    b.work = group_->all_reduce({b.flat}, ReduceOp::kAvg);
    // Overlapped: launched while a later bucket still waits for gradients backward computes.
    for (size_t k = next_launch_; k < buckets_.size(); ++k) {
      if (buckets_[k]->pending > 0) {
        ++launched_early_;
        break;
      }
    }
  }
}

void DistributedDataParallel::Finalize() {
  armed_ = false;
  std::vector<std::string> unready;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (used_[i] && !ready_[i]) unready.push_back(names_[i]);
  }
  if (!unready.empty()) {
    for (auto& b : buckets_) {  // let launched reductions finish before failing
      if (b->work) {
        try {
          b->work->wait();
        } catch (...) {
        }
        b->work.reset();
      }
    }
    std::string list;
    for (size_t i = 0; i < unready.size() && i < 10; ++i) list += (i ? ", " : "") + unready[i];
    if (unready.size() > 10) list += detail::StrCat(" and ", unready.size() - 10, " more");
    throw Error(detail::StrCat(
        "DistributedDataParallel: ", unready.size(), " parameter", unready.size() > 1 ? "s" : "",
        " received no gradient in this backward pass: ", list,
        ". Every rank reduces every bucket, so an unused parameter would leave the other ranks waiting: construct "
        "DistributedDataParallel with find_unused_parameters = true, or leave those parameters out of the loss's "
        "graph consistently (requires_grad = false)"));
  }
  // A parameter unused on every rank keeps its .grad (PyTorch's used map).
  std::vector<char> globally_used(params_.size(), 1);
  if (options_.find_unused_parameters) {
    Tensor map =
        tensor(std::vector<int32_t>(used_.begin(), used_.end())).to(params_.empty() ? kCPU : params_[0].device());
    Wait(*group_->all_reduce({map}, ReduceOp::kMax));
    const std::vector<int32_t> any = map.to(kCPU).to_vector<int32_t>();
    for (size_t i = 0; i < params_.size(); ++i) globally_used[i] = any[i] != 0;
  }
  NoGradGuard no_grad;
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    std::shared_ptr<Work> work = std::move(b.work);  // every bucket was launched: none is unready
    Wait(*work);
    ++buckets_reduced_;
    AdoptBucket(b, params_, &globally_used);
  }
}

void DistributedDataParallel::Wait(Work& work) {
  const auto start = std::chrono::steady_clock::now();
  work.wait();
  collective_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DistributedDataParallel::reduce_gradients() {
  NoGradGuard no_grad;
  for (auto& b : buckets_) {
    FillBucket(*b, params_, nullptr);
    Wait(*group_->all_reduce({b->flat}, ReduceOp::kAvg));
    ++buckets_reduced_;
    AdoptBucket(*b, params_, nullptr);
  }
}

// ---- rank agreement ----

namespace {

uint64_t HashBytes(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 1469598103934665603ull;
  const int64_t n = c.nbytes();
  int64_t i = 0;
  // 8 bytes at a time (FNV-1a over words): fast enough to run at every checkpoint.
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

void check_rank_agreement(const nn::Module& module, ProcessGroup& group, int64_t step) {
  if (group.size() == 1) return;
  const auto named = module.named_parameters();
  std::vector<int64_t> local;
  local.reserve(named.size() + 1);
  local.push_back(static_cast<int64_t>(named.size()));
  for (const auto& [name, p] : named) local.push_back(static_cast<int64_t>(HashBytes(p)));
  const auto rows = GatherRows(group, local);
  for (size_t i = 0; i < named.size(); ++i) {
    std::vector<std::pair<int64_t, std::vector<int>>> groups;  // hash -> ranks
    for (int r = 0; r < group.size(); ++r) {
      const int64_t h = rows[r][i + 1];
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == h; });
      if (it == groups.end()) {
        groups.push_back({h, {r}});
      } else {
        it->second.push_back(r);
      }
    }
    if (groups.size() == 1) continue;
    // Every rank reaches here for the same parameter: gather it to say by how much they differ.
    const Tensor& p = named[i].second;
    std::vector<Tensor> all;
    for (int r = 0; r < group.size(); ++r) all.push_back(empty_like(p).to(kCPU));
    group.all_gather(all, p.to(kCPU).contiguous())->wait();
    double max_diff = 0;
    for (int r = 1; r < group.size(); ++r) {
      max_diff = std::max(max_diff, (all[r].to(kFloat64) - all[0].to(kFloat64)).abs().max().item<double>());
    }
    std::ostringstream who;
    for (size_t g = 0; g < groups.size(); ++g) {
      who << (g ? "; " : "") << Ranks(groups[g].second) << " hold" << (groups[g].second.size() > 1 ? "" : "s")
          << " value #" << g + 1;
    }
    throw RankDivergenceError(
        detail::StrCat("ranks disagree on parameter '", named[i].first, "' at step ", step, ": ", who.str(),
                       " (largest difference from rank 0: ", max_diff,
                       "). Data-parallel replicas must stay identical; something changed one rank's weights outside "
                       "the synchronised step (a rank-dependent update, a non-deterministic kernel, or memory "
                       "corruption)"),
        named[i].first);
  }
}

}  // namespace anvil::distributed
