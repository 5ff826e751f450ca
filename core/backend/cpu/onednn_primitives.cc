// oneDNN's bf16 and int8 primitives through its C API (interface, threading and the cache:
// onednn_primitives.h).
#include "core/backend/cpu/onednn_primitives.h"

#include <dlfcn.h>

#include <array>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/blas_library.h"
#include "core/backend/cpu/isa.h"
#include "core/util/cpu_features.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::cpu::onednn {
namespace {

// ---- The C API of oneDNN 2.x, as declared in oneapi/dnnl/dnnl_types.h and dnnl.h. ----
// Handles are opaque pointers. Memory and operation descriptors are structs the library fills
// (dnnl_memory_desc_init_by_strides, dnnl_matmul_desc_init, ...) and reads; Anvil never reads
// their fields, so each is an aligned buffer larger than the struct (oneDNN 2.x's largest,
// dnnl_rnn_desc_t, holds 12 memory descriptors of under 1 KiB each).
using Status = int;  // dnnl_status_t; dnnl_success = 0
constexpr Status kSuccess = 0;
struct alignas(64) Desc {
  std::array<unsigned char, 16384> bytes{};
};
using Dims = int64_t[12];  // dnnl_dims_t (DNNL_MAX_NDIMS = 12)
struct ExecArg {           // dnnl_exec_arg_t
  int arg;
  void* memory;
};
// dnnl_data_type_t
constexpr int kBf16 = 2, kF32 = 3, kS32 = 4, kS8 = 5, kU8 = 6;
constexpr int kCpuEngine = 1;                // dnnl_engine_kind_t dnnl_cpu
constexpr unsigned kInOrderStream = 0x1;     // dnnl_stream_in_order
constexpr int kForwardInference = 0x60;      // dnnl_prop_kind_t dnnl_forward_inference
constexpr int kConvolutionDirect = 0x1;      // dnnl_alg_kind_t dnnl_convolution_direct
constexpr int kEltwiseRelu = 0x1f;           // dnnl_alg_kind_t dnnl_eltwise_relu
constexpr int kQueryImplInfoStr = 8;         // dnnl_query_t dnnl_query_impl_info_str
constexpr int kQueryScratchpadMd = 128 + 8;  // dnnl_query_scratchpad_md
constexpr int kScratchpadUser = 1;           // dnnl_scratchpad_mode_user
constexpr int kFormatAny = 1;                // dnnl_format_tag_t dnnl_format_tag_any
constexpr int kQuerySrcMd = 128 + 1, kQueryWeightsMd = 128 + 3, kQueryDstMd = 128 + 5;  // dnnl_query_*_md
// DNNL_ARG_* (dnnl_types.h)
constexpr int kArgSrc = 1, kArgDst = 17, kArgWeights = 33, kArgBias = 41, kArgScratchpad = 80;

struct Api {
  Status (*engine_create)(void** engine, int kind, size_t index);
  Status (*stream_create)(void** stream, void* engine, unsigned flags);
  Status (*stream_wait)(void* stream);
  Status (*memory_desc_init_by_strides)(Desc* md, int ndims, const Dims dims, int data_type, const Dims strides);
  Status (*memory_desc_init_by_tag)(Desc* md, int ndims, const Dims dims, int data_type, int tag);
  int (*memory_desc_equal)(const void* lhs, const void* rhs);
  Status (*reorder_primitive_desc_create)(void** pd, const void* src_md, void* src_engine, const void* dst_md,
                                          void* dst_engine, const void* attr);
  size_t (*memory_desc_get_size)(const void* md);
  Status (*matmul_desc_init)(Desc* op, const Desc* src, const Desc* weights, const Desc* bias, const Desc* dst);
  Status (*dilated_convolution_forward_desc_init)(Desc* op, int prop_kind, int alg_kind, const Desc* src,
                                                  const Desc* weights, const Desc* bias, const Desc* dst,
                                                  const Dims strides, const Dims dilates, const Dims padding_l,
                                                  const Dims padding_r);
  Status (*attr_create)(void** attr);
  Status (*attr_destroy)(void* attr);
  Status (*attr_set_scratchpad_mode)(void* attr, int mode);
  Status (*attr_set_post_ops)(void* attr, const void* post_ops);
  Status (*post_ops_create)(void** post_ops);
  Status (*post_ops_destroy)(void* post_ops);
  Status (*post_ops_append_sum)(void* post_ops, float scale);
  Status (*post_ops_append_eltwise)(void* post_ops, float scale, int alg_kind, float alpha, float beta);
  Status (*primitive_desc_create)(void** pd, const Desc* op, const void* attr, void* engine, const void* hint);
  Status (*primitive_desc_destroy)(void* pd);
  Status (*primitive_desc_query)(const void* pd, int what, int index, void* result);
  const void* (*primitive_desc_query_md)(const void* pd, int what, int index);
  Status (*primitive_create)(void** primitive, const void* pd);
  Status (*primitive_destroy)(void* primitive);
  Status (*primitive_execute)(const void* primitive, void* stream, int nargs, const ExecArg* args);
  Status (*memory_create)(void** memory, const void* md, void* engine, void* handle);
  Status (*memory_destroy)(void* memory);

  void* engine = nullptr;
  const blas::OneDnn* lib = nullptr;
  std::string version;
};

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  return out != nullptr;
}

struct Loaded {
  std::optional<Api> api;
  std::string why;
};

Loaded Load() {
  Loaded out;
  const blas::OneDnn* lib = blas::onednn(&out.why);
  if (lib == nullptr) return out;
  Api a{};
  void* h = lib->handle;
  const bool ok = Resolve(h, "dnnl_engine_create", a.engine_create) &&
                  Resolve(h, "dnnl_stream_create", a.stream_create) && Resolve(h, "dnnl_stream_wait", a.stream_wait) &&
                  Resolve(h, "dnnl_memory_desc_init_by_strides", a.memory_desc_init_by_strides) &&
                  Resolve(h, "dnnl_memory_desc_get_size", a.memory_desc_get_size) &&
                  Resolve(h, "dnnl_memory_desc_init_by_tag", a.memory_desc_init_by_tag) &&
                  Resolve(h, "dnnl_memory_desc_equal", a.memory_desc_equal) &&
                  Resolve(h, "dnnl_reorder_primitive_desc_create", a.reorder_primitive_desc_create) &&
                  Resolve(h, "dnnl_matmul_desc_init", a.matmul_desc_init) &&
                  Resolve(h, "dnnl_dilated_convolution_forward_desc_init", a.dilated_convolution_forward_desc_init) &&
                  Resolve(h, "dnnl_primitive_attr_create", a.attr_create) &&
                  Resolve(h, "dnnl_primitive_attr_destroy", a.attr_destroy) &&
                  Resolve(h, "dnnl_primitive_attr_set_scratchpad_mode", a.attr_set_scratchpad_mode) &&
                  Resolve(h, "dnnl_primitive_attr_set_post_ops", a.attr_set_post_ops) &&
                  Resolve(h, "dnnl_post_ops_create", a.post_ops_create) &&
                  Resolve(h, "dnnl_post_ops_destroy", a.post_ops_destroy) &&
                  Resolve(h, "dnnl_post_ops_append_sum", a.post_ops_append_sum) &&
                  Resolve(h, "dnnl_post_ops_append_eltwise", a.post_ops_append_eltwise) &&
                  Resolve(h, "dnnl_primitive_desc_create", a.primitive_desc_create) &&
                  Resolve(h, "dnnl_primitive_desc_destroy", a.primitive_desc_destroy) &&
                  Resolve(h, "dnnl_primitive_desc_query", a.primitive_desc_query) &&
                  Resolve(h, "dnnl_primitive_desc_query_md", a.primitive_desc_query_md) &&
                  Resolve(h, "dnnl_primitive_create", a.primitive_create) &&
                  Resolve(h, "dnnl_primitive_destroy", a.primitive_destroy) &&
                  Resolve(h, "dnnl_primitive_execute", a.primitive_execute) &&
                  Resolve(h, "dnnl_memory_create", a.memory_create) &&
                  Resolve(h, "dnnl_memory_destroy", a.memory_destroy);
  if (!ok) {
    // oneDNN 3.x renamed the descriptor functions (primitive descriptors are created directly).
    out.why = "libdnnl.so.2 " + lib->version + " lacks oneDNN 2.x's matmul or convolution descriptor functions";
    return out;
  }
  if (a.engine_create(&a.engine, kCpuEngine, 0) != kSuccess) {
    out.why = "oneDNN " + lib->version + " could not create its CPU engine";
    return out;
  }
  a.lib = lib;
  a.version = "oneDNN " + lib->version;
  out.api = a;
  return out;
}

const Loaded& Library() {
  static const Loaded loaded = Load();
  return loaded;
}

const Api& RequireApi() {
  const Loaded& l = Library();
  ANVIL_CHECK(l.api.has_value(), "oneDNN primitives are not available: ", l.why);
  return *l.api;
}

// oneDNN's OpenMP held at `threads` threads for a scope: the primitive's work split is fixed
// when it is built (from the OpenMP thread count then). Most primitives run on one thread, as
// Anvil's pool already splits the work; the multi-threaded bf16 product (bf16_matmul_rounded)
// builds and runs on the pool's count instead. The previous setting is restored: another
// library in the process may share the runtime.
class OmpThreads {
 public:
  OmpThreads(const blas::OneDnn* lib, int threads) : lib_(lib), threads_(threads) {
    if (lib_->omp_get_max_threads == nullptr) return;
    previous_ = lib_->omp_get_max_threads();
    if (previous_ != threads_) lib_->omp_set_num_threads(threads_);
  }
  ~OmpThreads() {
    if (lib_->omp_get_max_threads != nullptr && previous_ != threads_) lib_->omp_set_num_threads(previous_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  const blas::OneDnn* lib_;
  int threads_;
  int previous_ = 1;
};

void Check(Status s, const char* what) { ANVIL_CHECK(s == kSuccess, "oneDNN: ", what, " failed with status ", s); }

Desc MemoryDesc(const Api& api, std::initializer_list<int64_t> dims, int type, std::initializer_list<int64_t> strides) {
  Desc md;
  Dims d{}, s{};
  int i = 0;
  for (int64_t v : dims) d[i++] = v;
  i = 0;
  for (int64_t v : strides) s[i++] = v;
  Check(api.memory_desc_init_by_strides(&md, static_cast<int>(dims.size()), d, type, s),
        "dnnl_memory_desc_init_by_strides");
  return md;
}

// ---- Primitives and their cache. ----

// A built primitive, with the memory descriptors of its arguments (each call wraps its
// pointers in memory objects made from them) and its scratchpad's size.
struct Primitive {
  const Api* api = nullptr;
  void* pd = nullptr;
  void* primitive = nullptr;
  std::vector<int> args;        // DNNL_ARG_* per argument, in the order calls pass pointers
  std::vector<Desc> owned;      // the descriptors Anvil made (plain layouts)
  std::vector<const void*> md;  // each argument's descriptor: in `owned`, or oneDNN's (in a pd)
  size_t scratchpad = 0;        // bytes
  std::string impl;             // impl_info_str
  int threads = 1;              // OpenMP threads it was built for, and runs on
  // A convolution on oneDNN's blocked layouts (nChw16c, ...): the reorders from Anvil's NCHW
  // operands into them and back (null where the layout chosen is the plain one), and the
  // blocked buffers' sizes; the reorders read descriptors held by this primitive's pd.
  std::shared_ptr<Primitive> to_x, to_w, from_y;
  size_t x_bytes = 0, w_bytes = 0, y_bytes = 0;
  Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;
  ~Primitive() {
    if (primitive != nullptr) api->primitive_destroy(primitive);
    if (pd != nullptr) api->primitive_desc_destroy(pd);
  }
};

// The attributes a primitive is built with: the only calls that oneDNN 3.x changed for what is
// used here (3.x appends sum with a zero point and data type, dnnl_post_ops_append_sum(po,
// scale, zero_point, dt), and creates primitive descriptors without an operation descriptor);
// a port to 3.x starts here and in Build's descriptor calls.
struct Attr {
  const Api& api;
  void* attr = nullptr;
  void* post_ops = nullptr;
  Attr(const Api& a, bool accumulate, bool relu = false) : api(a) {
    Check(api.attr_create(&attr), "dnnl_primitive_attr_create");
    // The caller's scratchpad, per thread: a primitive may then run on several threads at once.
    Check(api.attr_set_scratchpad_mode(attr, kScratchpadUser), "dnnl_primitive_attr_set_scratchpad_mode");
    if (accumulate || relu) {
      Check(api.post_ops_create(&post_ops), "dnnl_post_ops_create");
      // beta = 1: C += A B through the sum post-op (scale 1), fixed in the primitive.
      if (accumulate) Check(api.post_ops_append_sum(post_ops, 1.0f), "dnnl_post_ops_append_sum");
      // max(x, 0) in float32, before the destination's one rounding.
      if (relu)
        Check(api.post_ops_append_eltwise(post_ops, 1.0f, kEltwiseRelu, 0.0f, 0.0f), "dnnl_post_ops_append_eltwise");
      Check(api.attr_set_post_ops(attr, post_ops), "dnnl_primitive_attr_set_post_ops");
    }
  }
  ~Attr() {
    if (post_ops != nullptr) api.post_ops_destroy(post_ops);
    api.attr_destroy(attr);
  }
  Attr(const Attr&) = delete;
  Attr& operator=(const Attr&) = delete;
};

// Builds the primitive for operation descriptor `op`, on `threads` OpenMP threads (OmpThreads).
std::shared_ptr<Primitive> Build(const Api& api, const Desc& op, const Attr& attr, int threads, std::vector<int> args,
                                 std::vector<Desc> mds, const char* what) {
  auto p = std::make_shared<Primitive>();
  p->api = &api;
  p->threads = threads;
  const OmpThreads omp(api.lib, threads);
  const Status s = api.primitive_desc_create(&p->pd, &op, attr.attr, api.engine, nullptr);
  ANVIL_CHECK(s == kSuccess, "oneDNN has no ", what, " implementation for this shape (status ", s, ")");
  Check(api.primitive_create(&p->primitive, p->pd), "dnnl_primitive_create");
  const char* impl = nullptr;
  if (api.primitive_desc_query(p->pd, kQueryImplInfoStr, 0, &impl) == kSuccess && impl != nullptr) p->impl = impl;
  const void* scratch = api.primitive_desc_query_md(p->pd, kQueryScratchpadMd, 0);
  p->scratchpad = scratch != nullptr ? api.memory_desc_get_size(scratch) : 0;
  p->args = std::move(args);
  p->owned = std::move(mds);
  for (const Desc& d : p->owned) p->md.push_back(&d);
  return p;
}

std::shared_ptr<Primitive> Build(const Api& api, const Desc& op, bool accumulate, std::vector<int> args,
                                 std::vector<Desc> mds, const char* what) {
  const Attr attr(api, accumulate);
  return Build(api, op, attr, 1, std::move(args), std::move(mds), what);
}

// A reorder between two layouts of the same tensor (descriptors owned elsewhere: the caller
// keeps their owners alive as long as the reorder).
std::shared_ptr<Primitive> BuildReorder(const Api& api, const void* from, const void* to) {
  auto p = std::make_shared<Primitive>();
  p->api = &api;
  const Attr attr(api, false);
  const OmpThreads one(api.lib, 1);
  Check(api.reorder_primitive_desc_create(&p->pd, from, api.engine, to, api.engine, attr.attr),
        "dnnl_reorder_primitive_desc_create");
  Check(api.primitive_create(&p->primitive, p->pd), "dnnl_primitive_create (reorder)");
  const void* scratch = api.primitive_desc_query_md(p->pd, kQueryScratchpadMd, 0);
  p->scratchpad = scratch != nullptr ? api.memory_desc_get_size(scratch) : 0;
  p->args = {kArgSrc, kArgDst};  // DNNL_ARG_FROM, DNNL_ARG_TO
  p->md = {from, to};
  return p;
}

// The cache key: the operation and every number its primitive depends on.
struct Key {
  std::vector<int64_t> v;
  bool operator==(const Key& o) const { return v == o.v; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

// A bounded LRU map from keys to built primitives (thread-safety: onednn_primitives.h).
class Cache {
 public:
  template <typename BuildFn>
  std::shared_ptr<Primitive> Get(const Key& key, BuildFn build) {
    MutexLock lock(&mu_);
    const auto it = map_.find(key);
    if (it != map_.end()) {
      ++stats_.hits;
      order_.splice(order_.begin(), order_, it->second.second);  // most recent first
      return it->second.first;
    }
    std::shared_ptr<Primitive> p = build();
    ++stats_.built;
    order_.push_front(key);
    map_.emplace(key, std::make_pair(p, order_.begin()));
    while (map_.size() > kPrimitiveCacheCapacity) {
      map_.erase(order_.back());
      order_.pop_back();
      ++stats_.evicted;
    }
    return p;
  }
  PrimitiveCacheStats Stats() {
    MutexLock lock(&mu_);
    PrimitiveCacheStats s = stats_;
    s.size = map_.size();
    return s;
  }

 private:
  Mutex mu_;  // held while a primitive is built: threads asking for the same new key build it once
  std::list<Key> order_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::unordered_map<Key, std::pair<std::shared_ptr<Primitive>, std::list<Key>::iterator>, KeyHash> map_
      ABSL_GUARDED_BY(mu_);
  PrimitiveCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

Cache& TheCache() {
  static Cache* cache = new Cache();  // never destroyed: primitives may outlive static teardown
  return *cache;
}

// Runs `p` on the calling thread with the argument pointers in p->args' order.
void Execute(const Primitive& p, std::initializer_list<const void*> pointers) {
  const Api& api = *p.api;
  // One in-order stream per thread, kept for the thread's life: a stream is not meant to be
  // shared by threads submitting at once, and a CPU stream is a small object.
  thread_local void* stream = nullptr;
  if (stream == nullptr) Check(api.stream_create(&stream, api.engine, kInOrderStream), "dnnl_stream_create");
  thread_local std::vector<unsigned char> scratchpad;
  if (scratchpad.size() < p.scratchpad) scratchpad.resize(p.scratchpad);

  std::vector<ExecArg> args;
  args.reserve(p.args.size() + 1);
  const auto release = [&] {
    for (const ExecArg& a : args) api.memory_destroy(a.memory);
  };
  size_t i = 0;
  for (const void* ptr : pointers) {
    void* mem = nullptr;
    if (api.memory_create(&mem, p.md[i], api.engine, const_cast<void*>(ptr)) != kSuccess) {
      release();
      ANVIL_CHECK(false, "oneDNN: dnnl_memory_create failed for argument ", p.args[i]);
    }
    args.push_back({p.args[i], mem});
    ++i;
  }
  if (p.scratchpad > 0) {
    Desc md = MemoryDesc(api, {static_cast<int64_t>(p.scratchpad)}, kU8, {1});
    void* mem = nullptr;
    if (api.memory_create(&mem, &md, api.engine, scratchpad.data()) != kSuccess) {
      release();
      ANVIL_CHECK(false, "oneDNN: dnnl_memory_create failed for the scratchpad");
    }
    args.push_back({kArgScratchpad, mem});
  }
  Status s;
  {
    const OmpThreads omp(api.lib, p.threads);
    s = api.primitive_execute(p.primitive, stream, static_cast<int>(args.size()), args.data());
    if (s == kSuccess) s = api.stream_wait(stream);
  }
  release();
  ANVIL_CHECK(s == kSuccess, "oneDNN: executing ", p.impl, " failed with status ", s);
}

// ---- The three operations. ----

std::shared_ptr<Primitive> Bf16Matmul(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
                                      int64_t b_cs, int64_t ldc, float beta) {
  const Api& api = RequireApi();
  ANVIL_CHECK(bf16_matmul_supported(a_rs, a_cs, b_rs, b_cs),
              "oneDNN bf16 matmul: expected row- or column-major operands (a stride of 1), got A strides (", a_rs, ", ",
              a_cs, ") and B strides (", b_rs, ", ", b_cs, ")");
  ANVIL_CHECK(beta == 0.0f || beta == 1.0f, "oneDNN bf16 matmul: expected beta 0 or 1, got ", beta);
  const bool accumulate = beta != 0.0f;
  const Key key{{1, m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, accumulate ? 1 : 0}};
  return TheCache().Get(key, [&] {
    const Desc a = MemoryDesc(api, {m, k}, kBf16, {a_rs, a_cs});
    const Desc b = MemoryDesc(api, {k, n}, kBf16, {b_rs, b_cs});
    const Desc c = MemoryDesc(api, {m, n}, kF32, {ldc, 1});
    Desc op;
    Check(api.matmul_desc_init(&op, &a, &b, nullptr, &c), "dnnl_matmul_desc_init");
    return Build(api, op, accumulate, {kArgSrc, kArgWeights, kArgDst}, {a, b, c}, "bf16 matmul");
  });
}

std::shared_ptr<Primitive> Bf16MatmulRounded(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
                                             int64_t b_cs, int64_t ldc, bool bias, bool relu, int threads) {
  const Api& api = RequireApi();
  ANVIL_CHECK(bf16_matmul_supported(a_rs, a_cs, b_rs, b_cs),
              "oneDNN bf16 matmul: expected row- or column-major operands (a stride of 1), got A strides (", a_rs, ", ",
              a_cs, ") and B strides (", b_rs, ", ", b_cs, ")");
  const Key key{{4, m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, bias ? 1 : 0, relu ? 1 : 0, threads}};
  return TheCache().Get(key, [&] {
    const Desc a = MemoryDesc(api, {m, k}, kBf16, {a_rs, a_cs});
    const Desc b = MemoryDesc(api, {k, n}, kBf16, {b_rs, b_cs});
    const Desc bb = MemoryDesc(api, {1, n}, kF32, {n, 1});  // broadcast over rows
    const Desc c = MemoryDesc(api, {m, n}, kBf16, {ldc, 1});
    Desc op;
    Check(api.matmul_desc_init(&op, &a, &b, bias ? &bb : nullptr, &c), "dnnl_matmul_desc_init");
    const Attr attr(api, false, relu);
    if (bias)
      return Build(api, op, attr, threads, {kArgSrc, kArgWeights, kArgBias, kArgDst}, {a, b, bb, c}, "bf16 matmul");
    return Build(api, op, attr, threads, {kArgSrc, kArgWeights, kArgDst}, {a, b, c}, "bf16 matmul");
  });
}

std::shared_ptr<Primitive> Int8Matmul(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldw, int64_t ldc) {
  const Api& api = RequireApi();
  const Key key{{2, m, n, k, lda, ldw, ldc}};
  return TheCache().Get(key, [&] {
    const Desc a = MemoryDesc(api, {m, k}, kU8, {lda, 1});
    const Desc b = MemoryDesc(api, {k, n}, kS8, {1, ldw});  // W [n, k] read as B = W^T
    const Desc c = MemoryDesc(api, {m, n}, kS32, {ldc, 1});
    Desc op;
    Check(api.matmul_desc_init(&op, &a, &b, nullptr, &c), "dnnl_matmul_desc_init");
    // No output scales, at build or run time: s32 sums out (onednn_primitives.h).
    return Build(api, op, false, {kArgSrc, kArgWeights, kArgDst}, {a, b, c}, "u8 x s8 -> s32 matmul");
  });
}

std::shared_ptr<Primitive> Bf16Conv(const Conv2dGeometry& g, bool bias) {
  const Api& api = RequireApi();
  ANVIL_CHECK(g.groups >= 1 && g.c % g.groups == 0 && g.oc % g.groups == 0,
              "oneDNN bf16 convolution: expected channels divisible by groups, got ", g.c, " and ", g.oc,
              " channels with groups=", g.groups);
  const Key key{{3,           g.n,          g.c,          g.h,        g.w,       g.oc,        g.kh,
                 g.kw,        g.groups,     g.stride_h,   g.stride_w, g.pad_top, g.pad_left,  g.pad_bottom,
                 g.pad_right, g.dilation_h, g.dilation_w, g.oh,       g.ow,      bias ? 1 : 0}};
  return TheCache().Get(key, [&] {
    const Desc x = MemoryDesc(api, {g.n, g.c, g.h, g.w}, kBf16, {g.c * g.h * g.w, g.h * g.w, g.w, 1});
    const int64_t icg = g.c / g.groups, ocg = g.oc / g.groups, kk = g.kh * g.kw;
    // Weights [oc, c/groups, kh, kw] contiguous; oneDNN takes groups as a leading dimension.
    const Desc w = g.groups == 1 ? MemoryDesc(api, {g.oc, icg, g.kh, g.kw}, kBf16, {icg * kk, kk, g.kw, 1})
                                 : MemoryDesc(api, {g.groups, ocg, icg, g.kh, g.kw}, kBf16,
                                              {ocg * icg * kk, icg * kk, kk, g.kw, 1});
    const Desc b = MemoryDesc(api, {g.oc}, kBf16, {1});
    const Desc y = MemoryDesc(api, {g.n, g.oc, g.oh, g.ow}, kBf16, {g.oc * g.oh * g.ow, g.oh * g.ow, g.ow, 1});
    // The layouts left to oneDNN ("any"): on plain NCHW its bf16 convolution is an im2col +
    // GEMM (gemm:jit), on its blocked layouts a direct JIT kernel; the operands are reordered.
    const auto any = [&](std::initializer_list<int64_t> dims) {
      Desc md;
      Dims d{};
      int i = 0;
      for (int64_t v : dims) d[i++] = v;
      Check(api.memory_desc_init_by_tag(&md, static_cast<int>(dims.size()), d, kBf16, kFormatAny),
            "dnnl_memory_desc_init_by_tag");
      return md;
    };
    const Desc xa = any({g.n, g.c, g.h, g.w}), ya = any({g.n, g.oc, g.oh, g.ow});
    const Desc wa = g.groups == 1 ? any({g.oc, icg, g.kh, g.kw}) : any({g.groups, ocg, icg, g.kh, g.kw});
    // oneDNN counts dilation from 0 (dense), PyTorch from 1.
    const Dims strides{g.stride_h, g.stride_w}, dilates{g.dilation_h - 1, g.dilation_w - 1};
    const Dims pad_l{g.pad_top, g.pad_left}, pad_r{g.pad_bottom, g.pad_right};
    Desc op;
    Check(api.dilated_convolution_forward_desc_init(&op, kForwardInference, kConvolutionDirect, &xa, &wa,
                                                    bias ? &b : nullptr, &ya, strides, dilates, pad_l, pad_r),
          "dnnl_dilated_convolution_forward_desc_init");
    std::shared_ptr<Primitive> p =
        bias ? Build(api, op, false, {kArgSrc, kArgWeights, kArgBias, kArgDst}, {x, w, b, y}, "bf16 convolution")
             : Build(api, op, false, {kArgSrc, kArgWeights, kArgDst}, {x, w, y}, "bf16 convolution");
    // Each operand in the layout the primitive chose, reordered from (or to) Anvil's NCHW.
    const void* x_md = api.primitive_desc_query_md(p->pd, kQuerySrcMd, 0);
    const void* w_md = api.primitive_desc_query_md(p->pd, kQueryWeightsMd, 0);
    const void* y_md = api.primitive_desc_query_md(p->pd, kQueryDstMd, 0);
    const size_t last = p->md.size() - 1;
    if (api.memory_desc_equal(x_md, p->md[0]) == 0) {
      p->to_x = BuildReorder(api, p->md[0], x_md);
      p->x_bytes = api.memory_desc_get_size(x_md);
      p->md[0] = x_md;
    }
    if (api.memory_desc_equal(w_md, p->md[1]) == 0) {
      p->to_w = BuildReorder(api, p->md[1], w_md);
      p->w_bytes = api.memory_desc_get_size(w_md);
      p->md[1] = w_md;
    }
    if (api.memory_desc_equal(y_md, p->md[last]) == 0) {
      p->from_y = BuildReorder(api, y_md, p->md[last]);
      p->y_bytes = api.memory_desc_get_size(y_md);
      p->md[last] = y_md;
    }
    return p;
  });
}

// A per-thread buffer of at least `bytes`, 64-byte aligned (oneDNN's blocked operands).
class Staging {
 public:
  void* Get(size_t bytes) {
    if (bytes + 64 > storage_.size()) storage_.resize(bytes + 64);
    const auto at = reinterpret_cast<uintptr_t>(storage_.data());
    return storage_.data() + ((64 - at % 64) % 64);
  }

 private:
  std::vector<unsigned char> storage_;
};

}  // namespace

bool available(std::string* why) {
  const Loaded& l = Library();
  if (why != nullptr) *why = l.why;
  return l.api.has_value();
}

std::string version() { return available() ? Library().api->version : "oneDNN (not available)"; }

bool bf16_available(std::string* why) {
  if (!available(why)) return false;
  if (!bf16_gemm_available()) {
    if (why != nullptr) {
      *why = cpu_features().avx512_bf16 ? "the active ISA level is " + std::string(isa_name(active_isa())) +
                                              ", below avx512 (bfloat16 products are widened to float32)"
                                        : "no AVX512-BF16 on this CPU (bfloat16 products are widened to float32)";
    }
    return false;
  }
  return true;
}

bool int8_available(std::string* why) {
  if (!available(why)) return false;
  const bool exact = (isa_at_least(CpuIsa::kAvx512) && cpu_features().avx512_vnni) || isa_at_least(CpuIsa::kAmx);
  if (!exact && why != nullptr) {
    *why =
        "oneDNN's int8 kernels below AVX512-VNNI multiply with vpmaddubsw, whose 16-bit sums saturate (active "
        "level " +
        std::string(isa_name(active_isa())) + (cpu_features().avx512_vnni ? ")" : ", no AVX512-VNNI on this CPU)");
  }
  return exact;
}

bool bf16_matmul_supported(int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs) {
  return (a_rs == 1 || a_cs == 1) && (b_rs == 1 || b_cs == 1);
}

void bf16_matmul(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                 int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  std::string why;
  ANVIL_CHECK(bf16_available(&why), "oneDNN bf16 matmul is not available: ", why);
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty sum: C = beta C (oneDNN takes no zero-sized reduction).
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, static_cast<size_t>(n) * sizeof(float));
    }
    return;
  }
  // A dimension of 1 makes its stride meaningless (a row of A given with any row stride):
  // written as the plain layout's, so the layout check passes and the key does not split on it.
  if (m == 1) a_rs = a_cs == 1 ? k : 1;
  if (n == 1) b_cs = b_rs == 1 ? k : 1;
  if (k == 1) {
    a_cs = a_rs == 1 ? m : 1;
    b_rs = b_cs == 1 ? n : 1;
  }
  const std::shared_ptr<Primitive> p = Bf16Matmul(m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, beta);
  Execute(*p, {a, b, c});
}

void bf16_matmul_rounded(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                         const uint16_t* b, int64_t b_rs, int64_t b_cs, const float* bias, bool relu, uint16_t* c,
                         int64_t ldc, int threads) {
  std::string why;
  ANVIL_CHECK(bf16_available(&why), "oneDNN bf16 matmul is not available: ", why);
  ANVIL_CHECK(threads >= 1, "oneDNN bf16 matmul: expected at least one thread, got ", threads);
  ANVIL_CHECK(m >= 0 && n >= 0 && k >= 1 && ldc >= n, "oneDNN bf16 matmul: expected k >= 1 and ldc >= n, got m=", m,
              " n=", n, " k=", k, " ldc=", ldc);
  if (m == 0 || n == 0) return;
  if (m == 1) a_rs = a_cs == 1 ? k : 1;  // as in bf16_matmul: a size-1 dimension's stride is free
  if (n == 1) b_cs = b_rs == 1 ? k : 1;
  if (k == 1) {
    a_cs = a_rs == 1 ? m : 1;
    b_rs = b_cs == 1 ? n : 1;
  }
  const std::shared_ptr<Primitive> p =
      Bf16MatmulRounded(m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, bias != nullptr, relu, threads);
  if (bias != nullptr) {
    Execute(*p, {a, b, bias, c});
  } else {
    Execute(*p, {a, b, c});
  }
}

std::string bf16_matmul_rounded_impl(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
                                     int64_t b_cs, int64_t ldc, bool bias, bool relu, int threads) {
  return Bf16MatmulRounded(m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, bias, relu, threads)->impl;
}

void int8_matmul(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda, const int8_t* w, int64_t ldw,
                 int32_t* c, int64_t ldc) {
  std::string why;
  ANVIL_CHECK(int8_available(&why), "oneDNN int8 matmul is not available: ", why);
  ANVIL_CHECK(m >= 0 && n >= 0 && k >= 0 && lda >= k && ldw >= k && ldc >= n,
              "oneDNN int8 matmul: expected lda >= k, ldw >= k, ldc >= n, got m=", m, " n=", n, " k=", k, " lda=", lda,
              " ldw=", ldw, " ldc=", ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, static_cast<size_t>(n) * sizeof(int32_t));
    return;
  }
  const std::shared_ptr<Primitive> p = Int8Matmul(m, n, k, lda, ldw, ldc);
  Execute(*p, {a, w, c});
}

void bf16_conv2d_forward(const Conv2dGeometry& g, const uint16_t* x, const uint16_t* w, const uint16_t* bias,
                         uint16_t* y) {
  std::string why;
  ANVIL_CHECK(bf16_available(&why), "oneDNN bf16 convolution is not available: ", why);
  const std::shared_ptr<Primitive> p = Bf16Conv(g, bias != nullptr);
  thread_local Staging staged_x, staged_w, staged_y;
  const void* xp = x;
  const void* wp = w;
  void* yp = y;
  if (p->to_x) {
    void* to = staged_x.Get(p->x_bytes);
    Execute(*p->to_x, {x, to});
    xp = to;
  }
  if (p->to_w) {
    void* to = staged_w.Get(p->w_bytes);
    Execute(*p->to_w, {w, to});
    wp = to;
  }
  if (p->from_y) yp = staged_y.Get(p->y_bytes);
  if (bias != nullptr) {
    Execute(*p, {xp, wp, bias, yp});
  } else {
    Execute(*p, {xp, wp, yp});
  }
  if (p->from_y) Execute(*p->from_y, {yp, y});
}

std::string bf16_matmul_impl(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs,
                             int64_t ldc, float beta) {
  return Bf16Matmul(m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, beta)->impl;
}

std::string int8_matmul_impl(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldw, int64_t ldc) {
  return Int8Matmul(m, n, k, lda, ldw, ldc)->impl;
}

std::string bf16_conv2d_impl(const Conv2dGeometry& g, bool bias) { return Bf16Conv(g, bias)->impl; }

PrimitiveCacheStats primitive_cache_stats() { return TheCache().Stats(); }

}  // namespace anvil::cpu::onednn
