// ProcessGroup's shared pieces: see process_group.h.
#include "core/distributed/process_group.h"

namespace anvil::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

Work::~Work() = default;
ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::CheckRoot(int root) const {
  ANVIL_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of a group of ", size_);
}

void ProcessGroup::CheckScatterInput(const Tensor& output, const Tensor& input) const {
  ANVIL_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: expected an input of ", size_, " x ",
              output.numel(), " elements, got ", input.numel());
}

}  // namespace anvil::distributed
