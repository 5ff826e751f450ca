// The cast kernels' double dispatch, alike on both backends: over every pair of dtypes, runs
// f.template operator()<In, Out>() with In the C++ type of the call's input and Out that of
// its output. The backends differ only in the loop the pair runs.
#pragma once

#include "core/backend/registry.h"

namespace anvil::backend {

template <typename F>
void DispatchCast(const KernelCall& c, const F& f) {
  ANVIL_DISPATCH_ALL(c.inputs[0].dtype(), "to", [&] {
    using In = scalar_t;
    ANVIL_DISPATCH_ALL(c.outputs[0].dtype(), "to", [&] { f.template operator()<In, scalar_t>(); });
  });
}

}  // namespace anvil::backend
