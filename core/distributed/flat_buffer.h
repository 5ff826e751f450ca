// Several tensors as one flat buffer for a collective, and the results back into them: what
// both process groups do when a call names more than one tensor (or a non-contiguous one).
#pragma once

#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::distributed {

// One contiguous 1-d buffer holding every tensor in order: the tensor itself when there is one
// contiguous tensor (the collective then runs in place), else a new buffer.
Tensor flatten_tensors(const std::vector<Tensor>& tensors);

// Copies consecutive pieces of `flat` back into `tensors` (each keeps its shape); nothing to do
// when `flat` is the one tensor itself.
void unflatten_into(const Tensor& flat, const std::vector<Tensor>& tensors);

}  // namespace anvil::distributed
