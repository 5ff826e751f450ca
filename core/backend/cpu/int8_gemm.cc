// The int8 product's dispatch and its scalar reference (int8_gemm.h).
#include "core/backend/cpu/int8_gemm.h"

#include <cstring>

#include "core/util/error.h"

namespace anvil::cpu {

Int8GemmKernel selected_int8_gemm() { return Int8GemmKernel::kReference; }

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

std::vector<Int8GemmKernel> available_int8_gemm_kernels() { return {Int8GemmKernel::kReference}; }

PackedInt8Weight pack_int8_weight(const int8_t* w, int64_t n, int64_t k, int64_t ldw, Int8GemmKernel kernel) {
  ANVIL_CHECK(n >= 0 && k >= 0 && ldw >= k, "pack_int8_weight: expected n >= 0, 0 <= k <= ldw, got n=", n, " k=", k,
              " ldw=", ldw);
  ANVIL_CHECK(k <= kMaxInt8GemmK, "pack_int8_weight: the inner dimension is at most ", kMaxInt8GemmK,
              " (int32 sums stay exact), got ", k);
  ANVIL_CHECK(kernel == Int8GemmKernel::kReference, "pack_int8_weight: kernel ", int8_gemm_kernel_name(kernel),
              " is not available on this CPU");
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

void int8_gemm_columns(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int64_t j0, int64_t j1,
                       int32_t* c, int64_t ldc) {
  ANVIL_CHECK(0 <= j0 && j0 <= j1 && j1 <= w.n(), "int8_gemm_columns: columns [", j0, ", ", j1, ") outside [0, ", w.n(),
              ")");
  switch (w.kernel()) {
    case Int8GemmKernel::kReference:
      ReferenceGemm(m, a, lda, w, j0, j1, c, ldc);
      return;
    default:
      ANVIL_CHECK(false, "int8_gemm: no kernel ", int8_gemm_kernel_name(w.kernel()), " in this build");
  }
}

void int8_gemm(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int32_t* c, int64_t ldc) {
  int8_gemm_columns(m, a, lda, w, 0, w.n(), c, ldc);
}

}  // namespace anvil::cpu
