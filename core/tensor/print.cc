// PyTorch-style repr: tensor([[1.0000, 2.5000], ...], dtype=float64, grad_fn=<MulBackward>).
// Floats print with 4 decimals, or in scientific notation when magnitudes span more than
// 1e3 or exceed 1e8 (PyTorch's rule); integral-valued floats print as "1.".
#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/tensor/tensor.h"

namespace anvil {
namespace {

struct Format {
  bool is_float = false, integral = true, sci = false;
};

Format Choose(const std::vector<double>& v, bool is_float) {
  Format f;
  f.is_float = is_float;
  if (!is_float) return f;
  double mx = 0, mn = INFINITY;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    if (x != std::floor(x)) f.integral = false;
    mx = std::max(mx, std::fabs(x));
    if (x != 0) mn = std::min(mn, std::fabs(x));
  }
  if (mx > 1e8 || (mn != INFINITY && mx / mn > 1e3 && !f.integral) || (mn < 1e-4 && mn != INFINITY)) {
    f.sci = true;
  }
  return f;
}

std::string Elem(double x, const Format& f) {
  std::ostringstream os;
  if (!f.is_float) {
    os << static_cast<int64_t>(x);
  } else if (std::isnan(x)) {
    os << "nan";
  } else if (std::isinf(x)) {
    os << (x > 0 ? "inf" : "-inf");
  } else if (f.sci) {
    os << std::scientific << std::setprecision(4) << x;
  } else if (f.integral) {
    os << static_cast<int64_t>(x) << ".";
  } else {
    os << std::fixed << std::setprecision(4) << x;
  }
  return os.str();
}

void Print(std::ostream& os, const std::vector<std::string>& s, const IntArray& sizes, size_t dim,
           int64_t& pos, size_t width, int indent) {
  if (dim == sizes.size()) {
    os << std::string(width - s[pos].size(), ' ') << s[pos];
    ++pos;
    return;
  }
  os << "[";
  for (int64_t i = 0; i < sizes[dim]; ++i) {
    if (i > 0) {
      os << ",";
      if (dim + 1 < sizes.size()) {
        os << std::string(sizes.size() - dim - 1, '\n') << std::string(indent + dim + 1, ' ');
      } else {
        os << " ";
      }
    }
    Print(os, s, sizes, dim + 1, pos, width, indent);
  }
  os << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "[ Tensor (undefined) ]";
  std::vector<double> v;
  {
    NoGradGuard no_grad;
    v = t.to(kCPU).to_vector<double>();
  }
  const Format f = Choose(v, t.is_floating_point() );
  std::vector<std::string> s;
  size_t width = 0;
  for (double x : v) {
    s.push_back(t.dtype() == kBool ? (x != 0 ? "True" : "False") : Elem(x, f));
    width = std::max(width, s.back().size());
  }
  os << "tensor(";
  int64_t pos = 0;
  if (t.dim() == 0) os << s[0];
  else Print(os, s, t.sizes(), 0, pos, width, 7);
  if (t.numel() == 0) os << ", size=" << shape_str(t.sizes());
  const bool default_type = t.dtype() == kFloat32 || t.dtype() == kInt64 || t.dtype() == kBool;
  if (!default_type) os << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device='" << t.device() << "'";
  if (auto fn = t.grad_fn()) os << ", grad_fn=<" << fn->name() << ">";
  else if (t.requires_grad()) os << ", requires_grad=True";
  return os << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace anvil
