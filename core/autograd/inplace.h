// Autograd for writes into existing tensors: copy_ with history, and rebasing a base's
// history when the write goes through one of its views (PyTorch's CopySlices).
// See NOTE [ View tracking ] in core/tensor/tensor_impl.h.
#pragma once

#include <memory>

#include "core/tensor/tensor.h"

namespace anvil::autograd {

class Node;

// Writes `src` into `self` (broadcast, dtype conversion) and makes self's (or its base's)
// history reflect the write. Bumps the version with `name`.
void copy_with_history(Tensor& self, const Tensor& src, const char* name);

// The grad_fn of a view whose base's history changed since the view's was built: a strided
// window of the base's current history. Returns null when no rebuild is needed.
std::shared_ptr<Node> regenerate_view_grad_fn(const Tensor& view);

}  // namespace anvil::autograd
