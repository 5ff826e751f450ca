// Flat buffers for collectives: see flat_buffer.h.
#include "core/distributed/flat_buffer.h"

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"

namespace anvil::distributed {

Tensor flatten_tensors(const std::vector<Tensor>& tensors) {
  if (tensors.size() == 1 && tensors[0].is_contiguous()) return tensors[0];
  NoGradGuard no_grad;
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.reshape({-1}));
  return cat(parts, 0);
}

void unflatten_into(const Tensor& flat, const std::vector<Tensor>& tensors) {
  if (tensors.size() == 1 && flat.impl_ptr() == tensors[0].impl_ptr()) return;
  NoGradGuard no_grad;
  int64_t off = 0;
  for (Tensor t : tensors) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

}  // namespace anvil::distributed
