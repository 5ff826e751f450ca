// The sizes of an Mm/Bmm call as both backends' matrix-product kernels read them.
#pragma once

#include <cstdint>

#include "core/backend/registry.h"

namespace anvil::backend {

// out [batch,] m x n = a [batch,] m x k @ b [batch,] k x n.
struct MatmulShape {
  bool batched;
  int64_t batch, m, n, k;
};

inline MatmulShape MakeMatmulShape(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const bool batched = out.dim() == 3;
  return {batched, batched ? out.size(0) : 1, out.size(-2), out.size(-1), c.inputs[0].size(-1)};
}

}  // namespace anvil::backend
