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

}  // namespace anvil::distributed
