// The fused loss rows' entry points (op_table.def, "losses").
#include <string>

#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {

std::array<Tensor, 2> nll_loss_rows(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                    int64_t reduction, int64_t ignore_index) {
  ANVIL_CHECK(reduction >= 0 && reduction <= 2, "nll_loss: expected reduction 0 (none), 1 (mean) or 2 (sum), got ",
              reduction);
  // The CPU kernel checks each target as it reads it. A GPU kernel cannot raise, so on other
  // devices the targets are checked here first (one read back to the host).
  if (!log_probs.is_cpu() && target.numel() > 0 && target.dtype() == kInt64) {
    const int64_t C = log_probs.dim() == 2 ? log_probs.size(1) : 0;
    const Tensor bad = (target != ignore_index) & ((target < 0) | (target >= C));
    if (bad.any().item<bool>()) {
      const int64_t value = target.masked_select(bad)[0].item<int64_t>();
      throw IndexError("nll_loss: target " + std::to_string(value) +
                       " is out of bounds: expected class indices in [0, " + std::to_string(C) + ") or ignore_index " +
                       std::to_string(ignore_index));
    }
  }
  NllLossArgs a;
  a.reduction = static_cast<nll::Reduction>(reduction);
  a.ignore_index = ignore_index;
  std::vector<Tensor> in{log_probs, target};
  if (weight.defined()) in.push_back(weight);
  std::vector<Tensor> out = dispatch(OpId::NllLoss, in, a);
  return {out[0], out[1]};
}

}  // namespace anvil
