// CPU kernels for fills and random draws. Outputs are passed in (Fill rows write into an
// existing tensor), so these serve both factories and in-place fill_/uniform_/normal_.
// Random element i always uses Philox block (offset + i / per_block): the stream does not
// depend on the thread count or on the layout of the output.
#include <algorithm>
#include <cmath>

#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/backend/fill_rows.h"

namespace anvil::cpu {
namespace {

// Calls f(linear index) -> value for every element of out, in row-major order.
template <typename T, typename F>
void Generate(const Tensor& out, const F& f) {
  StridedLoop<1> loop;
  loop.Build({&out});
  // Run walks row-major order, so a running counter from b is the linear index.
  parallel_for(0, loop.numel(), kGrain, [&](int64_t b, int64_t e) {
    int64_t i = b;
    loop.Run(b, e, [&](char** p, const int64_t* st, int64_t n) {
      for (int64_t j = 0; j < n; ++j, ++i) *reinterpret_cast<T*>(p[0] + j * st[0]) = f(i);
    });
  });
}

void FillKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const double v = c.attrs.get<FillArgs>().value;
  ANVIL_DISPATCH_ALL(out.dtype(), "fill", [&] {
    const scalar_t value = fill_rows::FillValue<scalar_t>(v);
    if (out.is_contiguous()) {  // the common case (zeros, ones, full): a plain vectorised fill
      scalar_t* p = out.data_ptr<scalar_t>();
      parallel_for(0, out.numel(), 1 << 16, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
      return;
    }
    Generate<scalar_t>(out, [&](int64_t) { return value; });
  });
}

// Element i of out = f(i), for the shared fill rows (core/backend/fill_rows.h).
ANVIL_FILL_GENERATOR(CpuGenerate)

}  // namespace

ANVIL_KERNEL_SLOT(Fill, FillKernel)
ANVIL_FILL_ROW_SLOTS(CpuGenerate)

}  // namespace anvil::cpu
