#include "core/autograd/inplace.h"

#include "core/autograd/derivatives.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::autograd {
namespace {

// A window of a contiguous buffer, as a differentiable view (AsStrided row).
Tensor Window(const Tensor& contiguous, const Geometry& g) {
  ViewFn fn;
  fn.kind = ViewFn::Strided;
  fn.sizes = g.sizes;
  fn.strides = g.strides;
  fn.start = g.offset;
  return make_view(OpId::AsStrided, contiguous, fn);
}

// The base's history after `view.copy_(src)`: outside the window the gradient goes to the
// base's previous history; inside it goes to src.
class CopySlices final : public Node {
 public:
  CopySlices(const Tensor& base, const Geometry& window, const Tensor& src)
      : base_meta_(base), window_(window), src_meta_(src) {
    next_edges_.push_back(gradient_edge(base));
    next_edges_.push_back(gradient_edge(src));
  }
  std::string name() const override { return "CopySlices"; }
  TensorMeta output_meta(int) const override { return base_meta_; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0].contiguous();
    Tensor in_window = Window(g, window_);
    std::vector<Tensor> out(2);
    if (next_edges_[1].valid()) {
      out[1] = sum_to(in_window, src_meta_.sizes).to(src_meta_.dtype);
    }
    if (next_edges_[0].valid()) {
      out[0] = g - dispatch1(OpId::StridedScatterAdd, {in_window.contiguous()},
                             StridedScatterArgs{base_meta_.sizes, window_});
    }
    return out;
  }

 private:
  TensorMeta base_meta_;
  Geometry window_;
  TensorMeta src_meta_;
};

Geometry RelGeometry(const ViewInfo& vi) { return {vi.rel_sizes, vi.rel_strides, vi.rel_offset}; }

}  // namespace

void copy_with_history(Tensor& self, const Tensor& src, const char* name) {
  Tensor r = src;
  if (r.dtype() != self.dtype()) r = r.to(self.dtype());
  if (r.sizes() != self.sizes()) r = r.expand(self.sizes());
  {
    NoGradGuard no_grad;
    if (r.numel() > 0) dispatch_into(OpId::Cast, {r}, self, CastArgs{self.dtype()});
  }
  self.storage()->bump_version(name);

  const auto& vi = self.impl()->view_info();
  if (vi) {
    ANVIL_CHECK(vi->rel_valid, name,
                ": this in-place write goes through a view whose position in its base cannot be "
                "tracked by autograd (a view of a non-contiguous tensor). clone() the view, or "
                "make the base contiguous, before writing into it.");
    Tensor base(vi->base);
    auto node = std::make_shared<CopySlices>(base, RelGeometry(*vi), r);
    auto& bm = base.impl()->autograd_mut();
    bm.grad_fn = node;
    bm.output_nr = 0;
    // self's own history is now a window of the rebased base.
    auto fn = regenerate_view_grad_fn(self);
    auto& sm = self.impl()->autograd_mut();
    sm.grad_fn = fn;
    sm.output_nr = 0;
    return;
  }
  if (r.requires_grad() && !r.grad_fn()) r = r.clone();  // a leaf src: give self a node
  auto& meta = self.impl()->autograd_mut();
  meta.grad_fn = r.requires_grad() ? r.grad_fn() : nullptr;
  meta.output_nr = r.requires_grad() ? r.output_nr() : 0;
}

std::shared_ptr<Node> regenerate_view_grad_fn(const Tensor& view) {
  const auto& vi = view.impl()->view_info();
  if (!vi || !vi->rel_valid) return nullptr;
  Tensor base(vi->base);
  if (!base.requires_grad()) return nullptr;
  EnableGradGuard grad_on;
  Tensor fresh = Window(base, RelGeometry(*vi));
  vi->grad_fn_version = view._version();
  return fresh.grad_fn();
}

}  // namespace anvil::autograd
