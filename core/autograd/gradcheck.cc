#include "core/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::autograd {
namespace {

void CheckInputs(const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    ANVIL_CHECK_TYPE(t.dtype() == kFloat64, "gradcheck: input ", i, " has dtype ", t.dtype(),
                     "; gradcheck needs float64 inputs. Finite differences with eps ~1e-6 are swamped "
                     "by float32 rounding (about 1e-7 relative), so a float32 check would report "
                     "noise. Convert with .to(kFloat64).");
  }
}

std::vector<Tensor> Outputs(const TensorFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  for (const Tensor& o : fn(inputs)) {
    if (o.defined() && o.is_floating_point()) out.push_back(o);
  }
  return out;
}

}  // namespace

GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  CheckInputs(inputs);
  GradcheckResult res;
  const size_t n_outputs = Outputs(fn, inputs).size();
  double worst = -INFINITY;
  for (size_t oi = 0; oi < n_outputs; ++oi) {
    for (size_t ii = 0; ii < inputs.size(); ++ii) {
      int64_t n_out = 0;
      const Tensor& x = inputs[ii];
      if (!x.defined() || !x.requires_grad()) continue;
      // Numerical Jacobian column by column (perturb one input element at a time).
      std::vector<std::vector<double>> num(x.numel());
      for (int64_t k = 0; k < x.numel(); ++k) {
        auto perturb = [&](double delta) {
          NoGradGuard no_grad;
          Tensor e = x.detach();  // any layout: walk to element k by its multi-index
          int64_t rem = k;
          IntArray idx(x.dim());
          for (int64_t d = x.dim() - 1; d >= 0; --d) {
            idx[d] = rem % x.size(d);
            rem /= x.size(d);
          }
          for (int64_t d = 0; d < x.dim(); ++d) e = e.select(0, idx[d]);
          e.add_(delta);
        };
        // fn runs with grad mode on: it may itself differentiate (gradgradcheck).
        perturb(opt.eps);
        std::vector<double> plus = Outputs(fn, inputs)[oi].detach().to_vector<double>();
        perturb(-2 * opt.eps);
        std::vector<double> minus = Outputs(fn, inputs)[oi].detach().to_vector<double>();
        perturb(opt.eps);
        n_out = static_cast<int64_t>(plus.size());
        num[k].resize(n_out);
        for (int64_t j = 0; j < n_out; ++j) num[k][j] = (plus[j] - minus[j]) / (2 * opt.eps);
      }
      // Analytical, on a graph built after the perturbations (they bump input versions).
      std::vector<Tensor> outs = Outputs(fn, inputs);
      // Analytical Jacobian row by row (one backward per output element).
      for (int64_t j = 0; j < n_out; ++j) {
        Tensor go = zeros_like(outs[oi]);
        {
          NoGradGuard no_grad;
          go.reshape({-1}).select(0, j).fill_(1);
        }
        // An output that does not depend on anything that requires grad has a zero Jacobian.
        std::vector<Tensor> ga =
            outs[oi].requires_grad() ? grad({outs[oi]}, {x}, {go}, true, false, true) : std::vector<Tensor>{Tensor()};
        std::vector<double> row = ga[0].defined() ? ga[0].to_vector<double>() : std::vector<double>(x.numel(), 0.0);
        for (int64_t k = 0; k < x.numel(); ++k) {
          const double a = row[k], nm = num[k][j];
          const double err = std::fabs(a - nm) - (opt.atol + opt.rtol * std::fabs(nm));
          if (err > worst || std::isnan(a)) {
            worst = std::isnan(a) ? INFINITY : err;
            res.input_index = static_cast<int>(ii);
            res.output_index = static_cast<int>(oi);
            res.input_element = k;
            res.output_element = j;
            res.analytical = a;
            res.numerical = nm;
          }
        }
      }
    }
  }
  res.worst_error = worst;
  res.ok = !(worst > 0);
  std::ostringstream os;
  os << (res.ok ? "gradcheck passed" : "Jacobian mismatch") << " for output " << res.output_index
     << " with respect to input " << res.input_index << ": worst element (input element " << res.input_element
     << ", output element " << res.output_element << ") numerical " << res.numerical << ", analytical "
     << res.analytical << " (atol " << opt.atol << ", rtol " << opt.rtol << ")";
  res.message = os.str();
  if (!res.ok && opt.raise_exception) throw Error(res.message);
  return res;
}

GradcheckResult gradgradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  CheckInputs(inputs);
  std::vector<Tensor> outs0 = Outputs(fn, inputs);
  std::vector<Tensor> vs;
  for (const Tensor& o : outs0) vs.push_back(randn(o.sizes(), kFloat64).requires_grad_(true));
  std::vector<Tensor> diff;
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) diff.push_back(x);
  const size_t n_in = inputs.size();
  TensorFn first = [&](const std::vector<Tensor>& args) {
    std::vector<Tensor> xs(args.begin(), args.begin() + n_in);
    std::vector<Tensor> v(args.begin() + n_in, args.end());
    std::vector<Tensor> o = Outputs(fn, xs);
    std::vector<Tensor> d;
    for (const Tensor& x : xs)
      if (x.defined() && x.requires_grad()) d.push_back(x);
    std::vector<Tensor> g = grad(o, d, v, true, true, true);
    std::vector<Tensor> r;
    for (size_t i = 0; i < g.size(); ++i) r.push_back(g[i].defined() ? g[i] : zeros_like(d[i]));
    return r;
  };
  std::vector<Tensor> all_in = inputs;
  all_in.insert(all_in.end(), vs.begin(), vs.end());
  return gradcheck(first, all_in, opt);
}

}  // namespace anvil::autograd
