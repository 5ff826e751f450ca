#include "core/ops/dispatch.h"

#include "core/amp/autocast.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/inplace.h"
#include "core/autograd/node.h"
#include "core/backend/registry.h"
#include "core/export/capture.h"
#include "core/ops/functions.h"
#include "core/ops/op_count.h"
#include "core/ops/op_trace.h"
#include "core/util/error.h"

namespace anvil {
namespace {

Device CommonDevice(OpId op, const std::vector<Tensor>& inputs) {
  Device dev = inputs.empty() ? kCPU : inputs[0].device();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ANVIL_CHECK(inputs[i].defined(), op_name(op), ": input ", i, " is an undefined tensor");
    ANVIL_CHECK(inputs[i].device() == dev,
                "Expected all tensors to be on the same device, but found at least two devices, ", dev, " and ",
                inputs[i].device(), " (", op_name(op), ", input ", i, ")");
  }
  return dev;
}

// ops_dispatched_on_this_thread's counter, and how deep in kernels this thread is (a kernel's
// own inner ops are not counted).
thread_local int64_t ops_dispatched = 0;
thread_local int kernel_depth = 0;

void RunKernel(OpId op, Device dev, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
               const OpAttrs& attrs) {
  KernelFn fn = backend_for(dev).kernel(op);
  if (fn == nullptr) {
    throw NotImplementedError(detail::StrCat("op '", op_name(op), "' has no kernel for device ", dev));
  }
  detail::trace_op(op);
  if (kernel_depth == 0) ++ops_dispatched;
  struct Depth {
    Depth() { ++kernel_depth; }
    ~Depth() { --kernel_depth; }
  } inside;
  NoGradGuard no_grad;                         // kernels may compose tensor ops internally: never record them
  exporter::detail::KernelScope not_captured;  // nor capture them for export
  autocast::detail::KernelScope not_autocast;  // nor autocast them
  fn(KernelCall{op, inputs, outputs, attrs});
}

}  // namespace

int64_t ops_dispatched_on_this_thread() { return ops_dispatched; }

void check_op_args(OpId op, const OpAttrs& attrs) {
  const OpInfo& info = op_info(op);
  ANVIL_INTERNAL_ASSERT(attrs.empty() || attrs.index() == info.args, op_name(op), " takes ", op_args_name(info.args),
                        ", the call passed ", op_args_name(attrs.index()));
}

namespace {

bool HasInternalOverlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) == 0 && t.size(d) > 1) return true;
  }
  return false;
}

// PyTorch's assert_no_partial_overlap: an input that shares memory with the destination
// must be the very same window, or the op would read elements it already overwrote.
void CheckNoPartialOverlap(const Tensor& self, const Tensor& in, const char* name) {
  if (!in.defined() || !in.is_alias_of(self) || in.numel() == 0 || self.numel() == 0) return;
  if (in.sizes() == self.sizes() && in.strides() == self.strides() && in.storage_offset() == self.storage_offset()) {
    return;
  }
  auto extent = [](const Tensor& t) {
    int64_t lo = t.storage_offset(), hi = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) hi += (t.size(d) - 1) * t.stride(d);
    return std::pair<int64_t, int64_t>{lo, hi};
  };
  auto [a0, a1] = extent(self);
  auto [b0, b1] = extent(in);
  ANVIL_CHECK(a1 < b0 || b1 < a0, name,
              ": unsupported operation: some elements of the input tensor and the written-to "
              "tensor refer to a single memory location. Please clone() the tensor before "
              "performing the operation.");
}

}  // namespace

namespace {

std::vector<Tensor> DispatchOp(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs) {
  const OpInfo& info = op_info(op);
  ANVIL_INTERNAL_ASSERT(info.kind != OpKind::View, "views go through make_view");
  const Device dev = CommonDevice(op, inputs);
  std::vector<Tensor> outputs;
  if (info.infer != InferFamily::Dynamic) {
    for (TensorSpec& s : infer_specs(op, inputs, attrs)) {
      outputs.push_back(empty(std::move(s.sizes), TensorOptions(s.dtype).with_device(dev)));
    }
  }
  RunKernel(op, dev, inputs, outputs, attrs);
  if (exporter::detail::active()) exporter::detail::on_op(op, inputs, outputs, attrs);
  autograd::record_op(op, attrs, inputs, outputs);
  return outputs;
}

}  // namespace

std::vector<Tensor> autocast_inputs(OpId op, std::vector<Tensor> inputs) {
  if (autocast::detail::t_any_enabled && !inputs.empty() && inputs[0].defined())
    return autocast::detail::cast_inputs(op, inputs, inputs[0].device());
  return inputs;
}

std::vector<Tensor> dispatch(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs) {
  // Inside an autocast region the row's policy picks the inputs' dtypes (core/amp/autocast.h).
  if (autocast::detail::t_any_enabled && !inputs.empty() && inputs[0].defined()) {
    const std::vector<Tensor> cast = autocast::detail::cast_inputs(op, inputs, inputs[0].device());
    std::vector<Tensor> out = DispatchOp(op, cast, attrs);
    if (autocast::detail::t_anomaly) autocast::detail::check_outputs(op, cast, out);
    return out;
  }
  return DispatchOp(op, inputs, attrs);
}

void dispatch_foreach(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs) {
  ANVIL_INTERNAL_ASSERT(op_info(op).kind == OpKind::Foreach, op_name(op), " is not a Foreach row");
  check_op_args(op, attrs);  // dispatch() checks in infer_specs; these two entries skip inference
  const Device dev = CommonDevice(op, inputs);
  std::vector<Tensor> no_outputs;
  RunKernel(op, dev, inputs, no_outputs, attrs);
}

void dispatch_into(OpId op, const std::vector<Tensor>& inputs, Tensor& out, const OpAttrs& attrs) {
  check_op_args(op, attrs);
  // Fills have no inputs: the output's device decides.
  const Device dev = inputs.empty() ? out.device() : CommonDevice(op, inputs);
  ANVIL_CHECK(out.device() == dev, op_name(op), ": output is on ", out.device(), " but inputs are on ", dev);
  std::vector<Tensor> outputs{out};
  if (exporter::detail::active()) exporter::detail::on_inplace(op, inputs, out, attrs);
  RunKernel(op, dev, inputs, outputs, attrs);
}

void check_inplace_allowed(const Tensor& self, const char* name) {
  if (GradMode::is_enabled()) {
    AutogradMeta* meta = self.impl()->autograd();
    ANVIL_CHECK(!(meta && meta->requires_grad && !meta->grad_fn), name,
                ": a leaf tensor that requires grad is being used in an in-place operation. "
                "Wrap the update in NoGradGuard (as optimizers do), or clone() the tensor first.");
    if (self.is_view()) {
      ANVIL_CHECK(!(self.impl()->view_info()->multi_output && self.requires_grad()), name,
                  ": this view is one of several that one call returned (split, chunk, unbind) and is being "
                  "modified in place; autograd cannot track such writes (PyTorch refuses them too). Replace "
                  "the in-place op by an out-of-place one, or clone() the view first.");
      Tensor base(self.impl()->view_info()->base);
      AutogradMeta* bm = base.impl()->autograd();
      ANVIL_CHECK(!(bm && bm->requires_grad && !bm->grad_fn), name,
                  ": a view of a leaf tensor that requires grad is being used in an in-place "
                  "operation. Wrap the update in NoGradGuard, or clone() first.");
    }
  }
  ANVIL_CHECK(!HasInternalOverlap(self), name,
              ": unsupported operation: more than one element of the written-to tensor (shape ",
              shape_str(self.sizes()), ", strides ", shape_str(self.strides()),
              ") refers to a single memory location. clone() the tensor first.");
}

Tensor& inplace_op(OpId op, Tensor& self, const std::vector<Tensor>& others, const OpAttrs& attrs, const char* name) {
  check_inplace_allowed(self, name);
  std::vector<Tensor> inputs{self};
  inputs.insert(inputs.end(), others.begin(), others.end());
  for (const Tensor& o : others) CheckNoPartialOverlap(self, o, name);
  const TensorSpec spec = infer_specs(op, inputs, attrs)[0];
  ANVIL_CHECK(spec.sizes == self.sizes(), name, ": output with shape ", shape_str(self.sizes()),
              " doesn't match the broadcast shape ", shape_str(spec.sizes));
  ANVIL_CHECK_TYPE(spec.dtype == self.dtype(), name, ": result type ", spec.dtype,
                   " can't be cast to the desired output type ", self.dtype());
  const bool history = GradMode::is_enabled() && op_info(op).differentiable && autograd::any_requires_grad(inputs);
  if (!history) {
    dispatch_into(op, inputs, self, attrs);
    self.storage()->bump_version(name);
    return self;
  }
  // Out of place, then copy in with history. Backward may need the old value of self:
  // compute from a clone so the saved tensor is not the one being overwritten.
  const uint32_t saves = op_info(op).saves;
  if (saves & (I0 | IA)) inputs[0] = self.clone();
  Tensor result = dispatch1(op, inputs, attrs);
  return copy_into(self, result, name);
}

Tensor& copy_into(Tensor& self, const Tensor& src_in, const char* name) {
  check_inplace_allowed(self, name);
  const bool history = GradMode::is_enabled() && (src_in.requires_grad() || self.requires_grad());
  // Across devices (loading CPU weights into a model on a GPU, reading results back): the
  // bytes move first, then the usual broadcast-and-cast copy runs on the destination.
  Tensor src = src_in;
  if (src.defined() && src.device() != self.device()) {
    ANVIL_CHECK(!history, name, ": a copy from ", src.device(), " to ", self.device(),
                " that autograd must record is not supported; detach() the source or copy under NoGradGuard");
    src = src.detach().to(self.device());
  }
  CheckNoPartialOverlap(self, src, name);
  const OpAttrs attrs = CastArgs{self.dtype()};
  if (!history) {
    ANVIL_CHECK(broadcast_shapes(src.sizes(), self.sizes()) == self.sizes(), name, ": source of shape ",
                shape_str(src.sizes()), " cannot be broadcast to the destination shape ", shape_str(self.sizes()));
    if (src.numel() > 0) dispatch_into(OpId::Cast, {src}, self, attrs);
    self.storage()->bump_version(name);
    return self;
  }
  autograd::copy_with_history(self, src, name);
  return self;
}

}  // namespace anvil
