// Runs backward passes over the graph recorded by the forward code.
// Thread-safety: one backward at a time per graph; different graphs may run concurrently.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::autograd {

// Accumulates d(outputs)/d(leaf) into every reachable leaf's .grad().
// `grad_outputs[i]` may be undefined for a scalar output (then ones).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              std::optional<bool> retain_graph = {}, bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching any .grad(); like torch.autograd.grad.
// With create_graph the results carry history (for higher-order derivatives).
// allow_unused=false raises if an input is not reachable from the outputs.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = {},
                         bool create_graph = false, bool allow_unused = false);

// Runs `callback` once the backward pass running on this thread has finished with the graph
// (torch's Variable._execution_engine.queue_callback): DDP's reducer waits for its last
// buckets there. Throws when no backward pass runs on this thread.
void queue_callback(std::function<void()> callback);

}  // namespace anvil::autograd
