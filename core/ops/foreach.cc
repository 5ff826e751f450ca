// Fused optimizer steps: see foreach.h.
#include "core/ops/foreach.h"

#include <absl/types/span.h>

#include <algorithm>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/util/error.h"

namespace anvil {
namespace {

bool FusableDtype(ScalarType t) { return t == kFloat32 || t == kFloat64; }

struct NamedList {
  const char* name;
  const std::vector<Tensor>* tensors;
};

// Checks every list against params and flattens them into one input list, list after list.
std::vector<Tensor> Flatten(const char* op, const std::vector<Tensor>& params, absl::Span<const NamedList> lists) {
  ANVIL_CHECK(!params.empty(), op, ": got no parameters");
  const Device device = params[0].device();
  std::vector<Tensor> flat;
  flat.reserve(params.size() * (lists.size() + 1));
  auto check = [&](const char* list, size_t i, const Tensor& t) {
    ANVIL_CHECK(t.defined(), op, ": ", list, "[", i, "] is an undefined tensor");
    const Tensor& p = params[i];
    ANVIL_CHECK(t.device() == device, op, ": expected every tensor on ", device, ", but ", list, "[", i, "] is on ",
                t.device());
    ANVIL_CHECK_TYPE(FusableDtype(t.dtype()) && t.dtype() == p.dtype(), op, ": expected ", list, "[", i,
                     "] to be float32 or float64 like its parameter (", p.dtype(), "), got ", t.dtype());
    ANVIL_CHECK(t.sizes() == p.sizes(), op, ": ", list, "[", i, "] has shape ", shape_str(t.sizes()),
                " but its parameter has shape ", shape_str(p.sizes()));
    ANVIL_CHECK(t.is_contiguous(), op, ": ", list, "[", i, "] is not contiguous (strides ", shape_str(t.strides()),
                "); fused steps take dense tensors");
  };
  for (size_t i = 0; i < params.size(); ++i) check("params", i, params[i]);
  flat.insert(flat.end(), params.begin(), params.end());
  for (const NamedList& l : lists) {
    ANVIL_CHECK(l.tensors->size() == params.size(), op, ": expected ", params.size(), " ", l.name,
                " (one per parameter), got ", l.tensors->size());
    for (size_t i = 0; i < params.size(); ++i) check(l.name, i, (*l.tensors)[i]);
    flat.insert(flat.end(), l.tensors->begin(), l.tensors->end());
  }
  // Every tensor is written or read as a separate array (the kernels may assume so). One sorted
  // vector: this runs at every optimizer step.
  std::vector<const void*> starts;
  starts.reserve(flat.size());
  for (const Tensor& t : flat) {
    if (t.numel() > 0) starts.push_back(t.data_ptr());
  }
  std::sort(starts.begin(), starts.end());
  ANVIL_CHECK(std::adjacent_find(starts.begin(), starts.end()) == starts.end(), op,
              ": the same memory appears twice in the lists (a tensor passed as both a parameter and its "
              "state, or twice); each list needs tensors of their own");
  return flat;
}

// GradScaler's flag rides as the last input; returns whether there is one.
bool AppendFoundInf(const char* op, const std::vector<Tensor>& params, const Tensor& found_inf,
                    std::vector<Tensor>& inputs) {
  if (!found_inf.defined()) return false;
  ANVIL_CHECK(found_inf.dtype() == kFloat32 && found_inf.numel() == 1 && found_inf.is_contiguous(), op,
              ": found_inf must be a float32 tensor of one element, got ", found_inf.dtype(), " ",
              shape_str(found_inf.sizes()));
  ANVIL_CHECK(found_inf.device() == params[0].device(), op, ": found_inf is on ", found_inf.device(),
              " but the parameters are on ", params[0].device());
  inputs.push_back(found_inf);
  return true;
}

// Adam's and RMSprop's step counts on the device (float64 [3] each) ride after the lists.
void AppendStepCounts(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& step_counts,
                      std::vector<Tensor>& inputs) {
  ANVIL_CHECK(step_counts.size() == params.size(), op, ": expected ", params.size(),
              " step_counts (one per parameter), got ", step_counts.size());
  for (size_t i = 0; i < step_counts.size(); ++i) {
    const Tensor& s = step_counts[i];
    ANVIL_CHECK(
        s.defined() && s.dtype() == kFloat64 && s.numel() == 3 && s.is_contiguous(), op, ": step_counts[", i,
        "] must be a contiguous float64 tensor of 3 elements (t and its two bias-correction factors), got ",
        s.defined() ? detail::StrCat(s.dtype(), " ", shape_str(s.sizes())) : std::string("an undefined tensor"));
    ANVIL_CHECK(s.device() == params[0].device(), op, ": step_counts[", i, "] is on ", s.device(),
                " but the parameters are on ", params[0].device());
  }
  inputs.insert(inputs.end(), step_counts.begin(), step_counts.end());
  // The counts are written too: none may share memory with another count or a list's tensor.
  std::vector<const void*> starts;
  for (const Tensor& t : inputs) {
    if (t.numel() > 0) starts.push_back(t.data_ptr());
  }
  std::sort(starts.begin(), starts.end());
  ANVIL_CHECK(std::adjacent_find(starts.begin(), starts.end()) == starts.end(), op,
              ": a step count shares memory with another step count or a list's tensor; each parameter needs its own");
}

void BumpVersions(const std::vector<Tensor>& written, const char* op) {
  for (const Tensor& t : written) t.storage()->bump_version(op);
}

}  // namespace

bool fused_step_supported(const Tensor& param, const Tensor& grad) {
  return param.defined() && grad.defined() && FusableDtype(param.dtype()) && grad.dtype() == param.dtype() &&
         grad.device() == param.device() && grad.sizes() == param.sizes() && param.is_contiguous() &&
         grad.is_contiguous();
}

void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const OptimizerStepArgs& attrs, const Tensor& found_inf) {
  const char* op = "_fused_sgd_";
  ANVIL_CHECK(attrs.momentum != 0.0 || momentum_buffers.empty(), op, ": momentum buffers given with momentum 0");
  std::vector<Tensor> inputs = attrs.momentum != 0.0
                                   ? Flatten(op, params, {{"grads", &grads}, {"momentum_buffers", &momentum_buffers}})
                                   : Flatten(op, params, {{"grads", &grads}});
  OptimizerStepArgs a = attrs;
  a.skip_if_found_inf = AppendFoundInf(op, params, found_inf, inputs);
  dispatch_foreach(OpId::SgdStep, inputs, a);
  BumpVersions(params, op);
  BumpVersions(momentum_buffers, op);
}

namespace {

std::vector<Tensor> AdamLists(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                              const std::vector<Tensor>& max_exp_avg_sqs, bool amsgrad) {
  ANVIL_CHECK(amsgrad || max_exp_avg_sqs.empty(), op, ": max_exp_avg_sqs given without amsgrad");
  return amsgrad ? Flatten(op, params,
                           {{"grads", &grads},
                            {"exp_avgs", &exp_avgs},
                            {"exp_avg_sqs", &exp_avg_sqs},
                            {"max_exp_avg_sqs", &max_exp_avg_sqs}})
                 : Flatten(op, params, {{"grads", &grads}, {"exp_avgs", &exp_avgs}, {"exp_avg_sqs", &exp_avg_sqs}});
}

void BumpAdamVersions(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
                      const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs) {
  BumpVersions(params, op);
  BumpVersions(exp_avgs, op);
  BumpVersions(exp_avg_sqs, op);
  BumpVersions(max_exp_avg_sqs, op);
}

}  // namespace

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const OptimizerStepArgs& a) {
  const char* op = "_fused_adam_";
  ANVIL_CHECK(a.bias_correction1 > 0.0 && a.bias_correction2 > 0.0, op, ": bias corrections must be > 0, got ",
              a.bias_correction1, " and ", a.bias_correction2);
  ANVIL_CHECK(!a.device_step_counts && !a.skip_if_found_inf, op,
              ": step counts on the device and found_inf go through the overload that takes them");
  const std::vector<Tensor> inputs = AdamLists(op, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, a.amsgrad);
  dispatch_foreach(OpId::AdamStep, inputs, a);
  BumpAdamVersions(op, params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs);
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& step_counts,
                 const OptimizerStepArgs& attrs, const Tensor& found_inf) {
  const char* op = "_fused_adam_";
  std::vector<Tensor> inputs = AdamLists(op, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, attrs.amsgrad);
  AppendStepCounts(op, params, step_counts, inputs);
  OptimizerStepArgs a = attrs;
  a.device_step_counts = true;
  a.skip_if_found_inf = AppendFoundInf(op, params, found_inf, inputs);
  dispatch_foreach(OpId::AdamStep, inputs, a);
  BumpAdamVersions(op, params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs);
  BumpVersions(step_counts, op);
}

void fused_rmsprop_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& square_avgs, const std::vector<Tensor>& grad_avgs,
                    const std::vector<Tensor>& momentum_buffers, const std::vector<Tensor>& step_counts,
                    const OptimizerStepArgs& attrs, const Tensor& found_inf) {
  const char* op = "_fused_rmsprop_";
  const bool momentum = attrs.momentum > 0.0;
  ANVIL_CHECK(attrs.centered || grad_avgs.empty(), op, ": grad_avgs given without centered");
  ANVIL_CHECK(momentum || momentum_buffers.empty(), op, ": momentum buffers given with momentum 0");
  std::vector<NamedList> lists{{"grads", &grads}, {"square_avgs", &square_avgs}};
  if (attrs.centered) lists.push_back({"grad_avgs", &grad_avgs});
  if (momentum) lists.push_back({"momentum_buffers", &momentum_buffers});
  std::vector<Tensor> inputs = Flatten(op, params, lists);
  AppendStepCounts(op, params, step_counts, inputs);
  OptimizerStepArgs a = attrs;
  a.device_step_counts = true;
  a.skip_if_found_inf = AppendFoundInf(op, params, found_inf, inputs);
  dispatch_foreach(OpId::RmspropStep, inputs, a);
  BumpVersions(params, op);
  BumpVersions(square_avgs, op);
  BumpVersions(grad_avgs, op);
  BumpVersions(momentum_buffers, op);
  BumpVersions(step_counts, op);
}

}  // namespace anvil
