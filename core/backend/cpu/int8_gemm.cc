// The int8 product's dispatch and its scalar reference (int8_gemm.h).
#include "core/backend/cpu/int8_gemm.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/backend/cpu/int8_gemm_kernels.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/onednn_primitives.h"
#include "core/util/cpu_features.h"
#include "core/util/error.h"

namespace anvil::cpu {

namespace {

bool VnniAvailable() { return isa_at_least(CpuIsa::kAvx512) && cpu_features().avx512_vnni; }

// Whether `kernel` runs at the active ISA level, and why not ("" when it does).
std::string UnavailableReason(Int8GemmKernel kernel) {
  switch (kernel) {
    case Int8GemmKernel::kReference:
      return "";
    case Int8GemmKernel::kAvx2:
      return isa_at_least(CpuIsa::kAvx2) ? "" : "the active ISA level is " + std::string(isa_name(active_isa()));
    case Int8GemmKernel::kAvx512Vnni:
      if (!cpu_features().avx512_vnni) return "no AVX512-VNNI on this CPU";
      return VnniAvailable() ? "" : "the active ISA level is " + std::string(isa_name(active_isa())) + ", below avx512";
    case Int8GemmKernel::kAmx:
      return int8_kernels::AmxAvailable() ? "" : int8_kernels::AmxUnavailableReason();
  }
  return "unknown kernel";
}

}  // namespace

// AMX first wherever it runs: an AMX-packed weight is the VNNI layout, so the products with
// fewer rows than a tile still take vpdpbusd (int8_gemm_columns) and nothing is lost by packing
// for AMX.
Int8GemmKernel selected_int8_gemm() {
  if (int8_kernels::AmxAvailable()) return Int8GemmKernel::kAmx;
  if (VnniAvailable()) return Int8GemmKernel::kAvx512Vnni;
  if (isa_at_least(CpuIsa::kAvx2)) return Int8GemmKernel::kAvx2;
  return Int8GemmKernel::kReference;
}

std::string int8_gemm_kernel_name(Int8GemmKernel kernel) {
  switch (kernel) {
    case Int8GemmKernel::kReference:
      return "anvil-reference-int8";
    case Int8GemmKernel::kAvx2:
      return "anvil-avx2-int8 (vpmaddwd)";
    case Int8GemmKernel::kAvx512Vnni:
      return "anvil-avx512-vnni (vpdpbusd)";
    case Int8GemmKernel::kAmx:
      return "anvil-amx-int8 (tdpbusd)";
  }
  return "unknown";
}

std::vector<Int8GemmKernel> available_int8_gemm_kernels() {
  std::vector<Int8GemmKernel> out;
  for (Int8GemmKernel kernel :
       {Int8GemmKernel::kReference, Int8GemmKernel::kAvx2, Int8GemmKernel::kAvx512Vnni, Int8GemmKernel::kAmx}) {
    if (UnavailableReason(kernel).empty()) out.push_back(kernel);
  }
  return out;
}

std::string int8_gemm_unavailable_reason(Int8GemmKernel kernel) { return UnavailableReason(kernel); }

namespace {

std::string AvailableNames() {
  std::string out;
  for (Int8GemmKernel kernel : available_int8_gemm_kernels()) {
    out += (out.empty() ? "" : ", ") + int8_gemm_kernel_name(kernel);
  }
  return out;
}

// W in `kernel`'s layout (int8_gemm_kernels.h): its bytes, null for the reference kernel.
std::shared_ptr<int8_t[]> PackForKernel(const int8_t* w, int64_t n, int64_t k, int64_t ldw, Int8GemmKernel kernel,
                                        size_t& bytes) {
  bytes = 0;
  if (kernel == Int8GemmKernel::kReference) return nullptr;
  const bool pairs = kernel == Int8GemmKernel::kAvx2;
  bytes = static_cast<size_t>(pairs ? int8_kernels::Avx2PackedBytes(n, k) : int8_kernels::VnniPackedBytes(n, k));
  // One byte more, so packed() is never null for a kernel with a layout, even when n is 0.
  std::shared_ptr<int8_t[]> out(new int8_t[bytes + 1]);
  if (pairs) {
    int8_kernels::PackAvx2(w, n, k, ldw, out.get());
  } else {
    int8_kernels::PackVnni(w, n, k, ldw, out.get());
  }
  return out;
}

}  // namespace

PackedInt8Weight pack_int8_weight(const int8_t* w, int64_t n, int64_t k, int64_t ldw, Int8GemmKernel kernel) {
  ANVIL_CHECK(n >= 0 && k >= 0 && ldw >= k, "pack_int8_weight: expected n >= 0, 0 <= k <= ldw, got n=", n, " k=", k,
              " ldw=", ldw);
  ANVIL_CHECK(k <= kMaxInt8GemmK, "pack_int8_weight: the inner dimension is at most ", kMaxInt8GemmK,
              " (int32 sums stay exact), got ", k);
  const std::string why = UnavailableReason(kernel);
  ANVIL_CHECK(why.empty(), "pack_int8_weight: kernel ", int8_gemm_kernel_name(kernel), " cannot run here (", why,
              "); available: ", AvailableNames());
  PackedInt8Weight out;
  out.n_ = n;
  out.k_ = k;
  out.kernel_ = kernel;
  out.weight_.resize(static_cast<size_t>(n * k));
  out.row_sums_.assign(static_cast<size_t>(n), 0);
  for (int64_t j = 0; j < n; ++j) {
    if (k > 0) std::memcpy(out.weight_.data() + j * k, w + j * ldw, static_cast<size_t>(k));
    int32_t sum = 0;
    for (int64_t p = 0; p < k; ++p) sum += w[j * ldw + p];
    out.row_sums_[static_cast<size_t>(j)] = sum;
  }
  out.packed_ = PackForKernel(w, n, k, ldw, kernel, out.packed_bytes_);
  return out;
}

namespace {

void ReferenceGemm(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int64_t j0, int64_t j1,
                   int32_t* c, int64_t ldc) {
  const int64_t k = w.k();
  const int8_t* wt = w.weight().data();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      int32_t sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += static_cast<int32_t>(a[i * lda + p]) * wt[j * k + p];
      c[i * ldc + j] = sum;
    }
  }
}

}  // namespace

namespace {

std::optional<Int8GemmCandidate> ForcedInt8Candidate() {
  static const std::optional<Int8GemmCandidate> forced = []() -> std::optional<Int8GemmCandidate> {
    const char* v = std::getenv("ANVIL_INT8_GEMM");
    if (v == nullptr || *v == '\0') return std::nullopt;
    for (Int8GemmCandidate c : {Int8GemmCandidate::kAnvil, Int8GemmCandidate::kOneDnn}) {
      if (int8_gemm_candidate_name(c) != v) continue;
      const std::string why = int8_gemm_candidate_unavailable_reason(c);
      ANVIL_CHECK(why.empty(), "ANVIL_INT8_GEMM=", v, ": that candidate cannot run here: ", why);
      return c;
    }
    throw Error(std::string("ANVIL_INT8_GEMM='") + v + "': expected anvil or onednn");
  }();
  return forced;
}

// Where oneDNN's int8 matmul is preferred (one thread): nowhere, by measurement.
// - amx level, measured on an Intel Xeon with AMX-INT8 (family 6 model 207, anvil_bench_int8;
//   bench/RESULTS.md, "int8 and bf16 on AMX"), three runs on a shared 2-vCPU machine whose
//   AMX throughput varied by up to 1.7x between runs: Anvil's AMX kernel against oneDNN's
//   matmul primitive (brg:avx512_core_amx_int8) at Linear 1024x1024 batch 256: 1206 / 707 /
//   ~710 GOP/s against 671 / 725 / ~700; batch 32: 463 / 510 against 429 / 508; 2048^3: 439 /
//   492 against 447 / 496; at batch 1 (below a tile's rows: Anvil's vpdpbusd kernel) 61-116
//   against 16-29. Level or ahead everywhere, and without oneDNN's per-call weight reorder.
// - avx512 with VNNI, measured on Zen 5 (anvil_bench_int8; bench/RESULTS.md, "oneDNN bf16 and
//   int8 primitives"): Anvil's vpdpbusd kernel is ahead of oneDNN's matmul primitive
//   (brg:avx512_core_vnni) or level with it at every size, Linear 1024x1024 at batch 1, 32 and
//   256: 247 / 961 / 975 GOP/s against 97 / 751 / 975; 2048^3: 897 against 858.
bool OneDnnInt8Preferred(int64_t /*m*/, int64_t /*n*/, int64_t /*k*/) { return false; }

}  // namespace

std::string int8_gemm_candidate_name(Int8GemmCandidate c) {
  return c == Int8GemmCandidate::kOneDnn ? "onednn" : "anvil";
}

std::string int8_gemm_candidate_unavailable_reason(Int8GemmCandidate c) {
  if (c == Int8GemmCandidate::kAnvil) return "";
  std::string why;
  return onednn::int8_available(&why) ? "" : why;
}

Int8GemmCandidate int8_gemm_candidate_for(int64_t m, int64_t n, int64_t k) {
  if (const std::optional<Int8GemmCandidate> f = ForcedInt8Candidate()) return *f;
  if (!OneDnnInt8Preferred(m, n, k)) return Int8GemmCandidate::kAnvil;
  return onednn::int8_available() ? Int8GemmCandidate::kOneDnn : Int8GemmCandidate::kAnvil;
}

void int8_gemm_columns(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int64_t j0, int64_t j1,
                       int32_t* c, int64_t ldc) {
  ANVIL_CHECK(0 <= j0 && j0 <= j1 && j1 <= w.n(), "int8_gemm_columns: columns [", j0, ", ", j1, ") outside [0, ", w.n(),
              ")");
  ANVIL_CHECK(j0 % 16 == 0 && (j1 % 16 == 0 || j1 == w.n()),
              "int8_gemm_columns: expected j0 and j1 multiples of 16 (or j1 == n = ", w.n(), "), got [", j0, ", ", j1,
              ")");
  ANVIL_CHECK(m >= 0 && lda >= w.k() && ldc >= w.n(), "int8_gemm: expected m >= 0, lda >= k = ", w.k(),
              ", ldc >= n = ", w.n(), ", got m=", m, " lda=", lda, " ldc=", ldc);
  if (w.kernel() != Int8GemmKernel::kReference && m > 0 && j1 > j0 &&
      int8_gemm_candidate_for(m, j1 - j0, w.k()) == Int8GemmCandidate::kOneDnn) {
    onednn::int8_matmul(m, j1 - j0, w.k(), a, lda, w.weight().data() + j0 * w.k(), w.k(), c + j0, ldc);
    return;
  }
  const int8_t* packed = w.packed();
  switch (w.kernel()) {
    case Int8GemmKernel::kReference:
      ReferenceGemm(m, a, lda, w, j0, j1, c, ldc);
      return;
    case Int8GemmKernel::kAvx2:
      int8_kernels::GemmAvx2(m, a, lda, packed, w.n(), w.k(), j0, j1, c, ldc);
      return;
    case Int8GemmKernel::kAmx:
      // Tiles for products of a tile's rows or more, while the amx level is active; the same
      // layout on vpdpbusd otherwise.
      if (m >= int8_kernels::kAmxMinRows && int8_kernels::AmxAvailable()) {
        int8_kernels::GemmAmx(m, a, lda, packed, w.n(), w.k(), j0, j1, c, ldc);
        return;
      }
      [[fallthrough]];
    case Int8GemmKernel::kAvx512Vnni:
      int8_kernels::GemmVnni(m, a, lda, packed, w.n(), w.k(), j0, j1, c, ldc);
      return;
  }
}

void int8_gemm_amx_emulated(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int64_t j0, int64_t j1,
                            int32_t* c, int64_t ldc) {
  ANVIL_CHECK(w.kernel() == Int8GemmKernel::kAvx512Vnni || w.kernel() == Int8GemmKernel::kAmx,
              "int8_gemm_amx_emulated: expected a weight packed for ",
              int8_gemm_kernel_name(Int8GemmKernel::kAvx512Vnni), " or ", int8_gemm_kernel_name(Int8GemmKernel::kAmx),
              ", got one packed for ", int8_gemm_kernel_name(w.kernel()));
  ANVIL_CHECK(0 <= j0 && j0 <= j1 && j1 <= w.n() && j0 % 16 == 0, "int8_gemm_amx_emulated: columns [", j0, ", ", j1,
              ") are not a range of [0, ", w.n(), ") starting at a multiple of 16");
  int8_kernels::GemmAmxEmulated(m, a, lda, w.packed(), w.n(), w.k(), j0, j1, c, ldc);
}

int64_t int8_gemm_rows_per_block(const PackedInt8Weight& w) {
  // The AVX2 kernel streams W per 6-row panel and the reference reads it per row: neither has a
  // row block of its own, and the VNNI kernel's keeps their scratch as small.
  return w.kernel() == Int8GemmKernel::kAmx && int8_kernels::AmxAvailable() ? int8_kernels::kAmxRowBlock
                                                                            : int8_kernels::kVnniRowBlock;
}

void int8_gemm(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int32_t* c, int64_t ldc) {
  int8_gemm_columns(m, a, lda, w, 0, w.n(), c, ldc);
}

}  // namespace anvil::cpu
