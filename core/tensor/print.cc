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

constexpr int64_t kSummarizeAbove = 1000;  // PyTorch's threshold
constexpr int64_t kEdgeItems = 3;

// The indices shown along one dim: all of them, or the first and last kEdgeItems with -1
// marking the ellipsis.
std::vector<int64_t> Shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  if (!summarize || n <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
  idx.push_back(-1);
  for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
  return idx;
}

struct Printer {
  const std::vector<std::string>& s;  // every element, formatted, row-major
  const IntArray& sizes;
  bool summarize;
  size_t width;
  int indent;

  void Print(std::ostream& os, size_t dim, int64_t offset, int64_t stride_elems) const {
    if (dim == sizes.size()) {
      os << std::string(width - s[offset].size(), ' ') << s[offset];
      return;
    }
    const int64_t inner = stride_elems / std::max<int64_t>(sizes[dim], 1);
    os << "[";
    bool first = true;
    for (int64_t i : Shown(sizes[dim], summarize)) {
      if (!first) {
        os << ",";
        if (dim + 1 < sizes.size()) {
          os << std::string(sizes.size() - dim - 1, '\n') << std::string(indent + dim + 1, ' ');
        } else {
          os << " ";
        }
      }
      first = false;
      if (i < 0) {
        os << (dim + 1 < sizes.size() ? "..." : " ...");  // PyTorch does not pad it
        continue;
      }
      Print(os, dim + 1, offset + i * inner, inner);
    }
    os << "]";
  }
};

// Marks the elements a summarised print shows (all when not summarising).
void MarkShown(const IntArray& sizes, bool summarize, size_t dim, int64_t offset, int64_t stride,
               std::vector<bool>& shown) {
  if (dim == sizes.size()) {
    shown[offset] = true;
    return;
  }
  const int64_t inner = stride / std::max<int64_t>(sizes[dim], 1);
  for (int64_t i : Shown(sizes[dim], summarize)) {
    if (i >= 0) MarkShown(sizes, summarize, dim + 1, offset + i * inner, inner, shown);
  }
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "[ Tensor (undefined) ]";
  std::vector<double> v;
  {
    NoGradGuard no_grad;
    v = t.to(kCPU).to_vector<double>();
  }
  const bool summarize = t.numel() > kSummarizeAbove;
  std::vector<bool> shown(v.size(), false);
  if (!v.empty()) MarkShown(t.sizes(), summarize, 0, 0, t.numel(), shown);
  std::vector<double> visible;
  for (size_t i = 0; i < v.size(); ++i) {
    if (shown[i]) visible.push_back(v[i]);
  }
  const Format f = Choose(visible, t.is_floating_point());
  std::vector<std::string> s(v.size());
  size_t width = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!shown[i]) continue;
    s[i] = t.dtype() == kBool ? (v[i] != 0 ? "True" : "False") : Elem(v[i], f);
    width = std::max(width, s[i].size());
  }
  os << "tensor(";
  if (t.numel() == 0) {
    os << "[]";
    if (t.dim() != 1) {
      os << ", size=(";
      for (int64_t d = 0; d < t.dim(); ++d) os << (d ? ", " : "") << t.size(d);
      os << (t.dim() == 1 ? ",)" : ")");
    }
  } else if (t.dim() == 0) {
    os << s[0];
  } else {
    Printer{s, t.sizes(), summarize, width, 7}.Print(os, 0, 0, t.numel());
  }
  const bool default_type = t.dtype() == kFloat32 || t.dtype() == kInt64 || t.dtype() == kBool;
  if (!default_type) os << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device='" << t.device() << "'";
  if (auto fn = t.grad_fn())
    os << ", grad_fn=<" << fn->name() << ">";
  else if (t.requires_grad())
    os << ", requires_grad=True";
  return os << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace anvil
