// CUDA kernels for im2col / col2im and the fused convolution rows (dims layout:
// ops/im2col.cc, then groups for the convolutions).
//
// im2col writes each column element from its one input pixel (zero in the padding); col2im
// has each image pixel gather the column entries that cover it, in the CPU's order (kernel
// row, then kernel column), so its sums need no atomics and equal the CPU's bit for bit.
//
// The convolutions follow NOTE [ Convolution as im2col ] (nn/conv.cc) on cuBLAS: the batch is
// cut into chunks whose column matrices fit a fixed budget, and each chunk's GEMMs are
// strided-batched over images (or over groups, whichever is larger), so a chunk costs one
// im2col launch and one cuBLAS call per group (or per image). The weight gradient sums over
// images inside one GEMM: the chunk's columns and output gradient are laid out
// channel-major ([rows, images * L]), so the reduction dimension is images * L and the sum
// order is cuBLAS's, fixed for a given shape (no atomics, no cross-chunk races: chunks
// accumulate in order with beta = 1). A 1x1 convolution with stride 1 and no padding reads
// the image as its own column matrix, as on the CPU.
#include <algorithm>
#include <climits>

#include "core/backend/common/window_geom.h"
#include "core/backend/cuda/blas.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/ops/functions.h"

namespace anvil::cuda {
namespace {

using backend::Geom;
using backend::MakeGeom;

// Where column element (image n, row r = (c * KH + i) * KW + j, column l = oy * OW + ox)
// lives: n * image_stride + r * row_stride + l. The op's own layout is [N, rows, L]; the weight
// gradient uses [rows, N, L].
struct ColLayout {
  int64_t image_stride, row_stride;
};

// image: contiguous [images, C, H, W].
template <typename T>
__global__ void Im2ColKernel(const T* image, T* cols, Geom g, int64_t images, ColLayout layout) {
  const int64_t L = g.OH * g.OW, rows = g.C * g.KH * g.KW, total = images * rows * L;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = t % L, r = (t / L) % rows, n = t / (L * rows);
    const int64_t ox = l % g.OW, oy = l / g.OW;
    const int64_t j = r % g.KW, i = (r / g.KW) % g.KH, c = r / (g.KW * g.KH);
    const int64_t y = oy * g.SH - g.PT + i * g.DH, x = ox * g.SW - g.PL + j * g.DW;
    T v = T(0);
    if (y >= 0 && y < g.H && x >= 0 && x < g.W) v = image[((n * g.C + c) * g.H + y) * g.W + x];
    cols[n * layout.image_stride + r * layout.row_stride + l] = v;
  }
}

// image: contiguous [images, C, H, W], overwritten. Pixel (y, x) is covered by kernel tap
// (i, j) at output position oy = (y + PT - i * DH) / SH when that divides exactly and lands
// in [0, OH) (and likewise for x): the taps the CPU's Col2ImPlane adds into it, in its order,
// with its rounding after each add.
template <typename T>
__global__ void Col2ImKernel(const T* cols, T* image, Geom g, int64_t images, ColLayout layout) {
  using M = opmath_t<T>;
  const int64_t total = images * g.C * g.H * g.W;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = t % g.W, y = (t / g.W) % g.H, c = (t / (g.W * g.H)) % g.C, n = t / (g.W * g.H * g.C);
    const T* base = cols + n * layout.image_stride + c * g.KH * g.KW * layout.row_stride;
    T acc = T(0);
    for (int64_t i = 0; i < g.KH; ++i) {
      const int64_t ty = y + g.PT - i * g.DH;
      if (ty < 0 || ty % g.SH != 0 || ty / g.SH >= g.OH) continue;
      const int64_t oy = ty / g.SH;
      for (int64_t j = 0; j < g.KW; ++j) {
        const int64_t tx = x + g.PL - j * g.DW;
        if (tx < 0 || tx % g.SW != 0 || tx / g.SW >= g.OW) continue;
        acc = T(M(acc) + M(base[(i * g.KW + j) * layout.row_stride + oy * g.OW + tx / g.SW]));
      }
    }
    image[t] = acc;
  }
}

template <typename T>
void Im2Col(const T* image, T* cols, const Geom& g, int64_t images, ColLayout layout, cudaStream_t stream) {
  const int64_t total = images * g.C * g.KH * g.KW * g.OH * g.OW;
  if (total == 0) return;
  Im2ColKernel<T><<<GridFor(total), kBlock, 0, stream>>>(image, cols, g, images, layout);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void Col2Im(const T* cols, T* image, const Geom& g, int64_t images, ColLayout layout, cudaStream_t stream) {
  const int64_t total = images * g.C * g.H * g.W;
  if (total == 0) return;
  Col2ImKernel<T><<<GridFor(total), kBlock, 0, stream>>>(cols, image, g, images, layout);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
}

void Im2ColRowKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = MakeGeom(c.attrs.get<WindowArgs>(), in.size(0), in.size(1));
  const int device = out.device().index;
  DeviceGuard guard(device);
  const int64_t rows = g.C * g.KH * g.KW, L = g.OH * g.OW;
  ANVIL_DISPATCH_FLOATING(in.dtype(), "im2col", [&] {
    Im2Col(in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), g, g.N, {rows * L, L}, current_stream(device));
  });
}

void Col2ImRowKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = MakeGeom(c.attrs.get<WindowArgs>(), out.size(0), out.size(1));
  const int device = out.device().index;
  DeviceGuard guard(device);
  const int64_t rows = g.C * g.KH * g.KW, L = g.OH * g.OW;
  ANVIL_DISPATCH_FLOATING(in.dtype(), "col2im", [&] {
    Col2Im(in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), g, g.N, {rows * L, L}, current_stream(device));
  });
}

// ---- convolution ----

using backend::ConvShape;
constexpr auto MakeShape = backend::MakeConvShape;

// Images per chunk: column buffers of at most ~256 MiB (one image at least), and images * L
// within cuBLAS's 32-bit dimensions (the weight gradient's reduction length).
int64_t ImagesPerChunk(const ConvShape& s, int64_t element_size) {
  constexpr int64_t kBudget = int64_t{256} << 20;
  const int64_t per_image = std::max<int64_t>(1, std::max(s.rows, s.OC) * s.L * element_size);
  const int64_t by_bytes = std::max<int64_t>(1, kBudget / per_image);
  const int64_t by_int = std::max<int64_t>(1, INT_MAX / std::max<int64_t>(s.L, 1));
  return std::min({by_bytes, by_int, std::max<int64_t>(s.g.N, 1)});
}

// One GEMM operand of every (image, group) pair: p + n * per_image + g * per_group, leading
// dimension ld.
template <typename T>
struct Operand {
  T* p;
  int64_t ld, per_image, per_group;
};

// C(n, g) = beta * C(n, g) + op(A(n, g)) op(B(n, g)) for n < images, g < groups: batched over
// the larger of the two, one cuBLAS call per entry of the smaller.
template <typename T>
void GemmImagesGroups(int device, bool ta, bool tb, int64_t m, int64_t n, int64_t k, Operand<const T> a,
                      Operand<const T> b, float beta, Operand<T> c, int64_t images, int64_t groups) {
  if (images >= groups) {
    for (int64_t g = 0; g < groups; ++g) {
      GemmStridedBatched<T>(device, ta, tb, m, n, k, a.p + g * a.per_group, a.ld, a.per_image, b.p + g * b.per_group,
                            b.ld, b.per_image, beta, c.p + g * c.per_group, c.ld, c.per_image, images);
    }
  } else {
    for (int64_t i = 0; i < images; ++i) {
      GemmStridedBatched<T>(device, ta, tb, m, n, k, a.p + i * a.per_image, a.ld, a.per_group, b.p + i * b.per_image,
                            b.ld, b.per_group, beta, c.p + i * c.per_image, c.ld, c.per_group, groups);
    }
  }
}

template <typename T>
__global__ void BiasFillKernel(T* out, const T* bias, int64_t n, int64_t channels, int64_t plane) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    out[t] = bias[(t / plane) % channels];
  }
}

void Zero(const Tensor& t, cudaStream_t stream) {
  ANVIL_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, static_cast<size_t>(t.nbytes()), stream));
}

// out [N, OC, OH, OW] = bias + W · columns, per image and group.
template <typename T>
void Conv2dForward(const KernelCall& call) {
  const backend::ConvForwardOperands op = backend::MakeConvForwardOperands(call);
  const Tensor &x = op.x, &w = op.w, &b = op.b, &out = call.outputs[0];
  const ConvShape& s = op.s;
  if (out.numel() == 0) return;
  const Geom& g = s.g;
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  T* po = out.data_ptr<T>();
  // The bias first and the GEMMs add onto it (beta = 1), as on the CPU.
  if (b.defined()) {
    BiasFillKernel<T><<<GridFor(out.numel()), kBlock, 0, stream>>>(po, b.data_ptr<T>(), out.numel(), s.OC, s.L);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  } else if (s.K == 0) {
    Zero(out, stream);
  }
  if (s.K == 0) return;  // no input channels: the bias (or zero) is the whole result
  const int64_t chunk = ImagesPerChunk(s, sizeof(T));
  const Tensor cols =
      s.direct ? Tensor() : empty({chunk * s.rows * s.L}, TensorOptions(x.dtype()).with_device(x.device()));
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const T* image = px + n0 * g.C * g.H * g.W;
    const T* columns = image;  // direct: [C, H * W] is already [rows, L]
    if (!s.direct) {
      Im2Col(image, cols.data_ptr<T>(), g, nb, {s.rows * s.L, s.L}, stream);
      columns = cols.data_ptr<T>();
    }
    GemmImagesGroups<T>(device, false, false, s.OCg, s.L, s.K, {pw, s.K, 0, s.OCg * s.K},
                        {columns, s.L, s.rows * s.L, s.K * s.L}, b.defined() ? 1.0f : 0.0f,
                        {po + n0 * s.OC * s.L, s.L, s.OC * s.L, s.OCg * s.L}, nb, s.G);
  }
}

// grad_x [N, C, H, W]: per image and group, columns = W^T · grad_y, then col2im.
template <typename T>
void Conv2dInputGrad(const KernelCall& call) {
  const Tensor gy = call.inputs[0].contiguous(), w = call.inputs[1].contiguous();
  const Tensor& out = call.outputs[0];
  const ConvShape s = MakeShape(call.attrs.get<WindowArgs>(), out.size(0), out.size(1), w.size(0));
  if (out.numel() == 0) return;
  const Geom& g = s.g;
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (s.OCg == 0) return Zero(out, stream);  // no output channels: nothing flows back
  const int64_t chunk = ImagesPerChunk(s, sizeof(T));
  const Tensor cols =
      s.direct ? Tensor() : empty({chunk * s.rows * s.L}, TensorOptions(gy.dtype()).with_device(gy.device()));
  const T* pg = gy.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    T* image = out.data_ptr<T>() + n0 * g.C * g.H * g.W;
    T* columns = s.direct ? image : cols.data_ptr<T>();
    GemmImagesGroups<T>(device, true, false, s.K, s.L, s.OCg, {pw, s.K, 0, s.OCg * s.K},
                        {pg + n0 * s.OC * s.L, s.L, s.OC * s.L, s.OCg * s.L}, 0.0f,
                        {columns, s.L, s.rows * s.L, s.K * s.L}, nb, s.G);
    if (!s.direct) Col2Im<T>(columns, image, g, nb, {s.rows * s.L, s.L}, stream);
  }
}

// grad_w [OC, C / G, KH, KW] = sum over images of grad_y_n · columns_nᵀ, per group. Per
// chunk of nb images: grad_y as [OC, nb * L] and the columns as [rows, nb * L], so one GEMM
// per chunk (batched over groups) does the whole sum; chunks accumulate in order.
template <typename T>
void Conv2dWeightGrad(const KernelCall& call) {
  const Tensor gy = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const Tensor& out = call.outputs[0];
  const ConvShape s = MakeShape(call.attrs.get<WindowArgs>(), x.size(0), x.size(1), gy.size(1));
  if (out.numel() == 0) return;
  const Geom& g = s.g;
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (g.N == 0) return Zero(out, stream);  // an empty sum
  const int64_t chunk = ImagesPerChunk(s, sizeof(T));
  const TensorOptions opts = TensorOptions(x.dtype()).with_device(x.device());
  const Tensor gy_t = empty({s.OC * chunk * s.L}, opts);
  const Tensor cols_t = empty({s.rows * chunk * s.L}, opts);
  // grad_y [nb, OC, L] to [OC, nb * L] is the im2col of a 1x1 window over an OC-channel image.
  const Geom gy_geom{g.N, s.OC, g.OH, g.OW, 1, 1, 1, 1, 0, 0, 1, 1, g.OH, g.OW};
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), width = nb * s.L;
    Im2Col(gy.data_ptr<T>() + n0 * s.OC * s.L, gy_t.data_ptr<T>(), gy_geom, nb, {s.L, width}, stream);
    Im2Col(x.data_ptr<T>() + n0 * g.C * g.H * g.W, cols_t.data_ptr<T>(), g, nb, {s.L, width}, stream);
    GemmStridedBatched<T>(device, false, true, s.OCg, s.K, width, gy_t.data_ptr<T>(), width, s.OCg * width,
                          cols_t.data_ptr<T>(), width, s.K * width, n0 == 0 ? 0.0f : 1.0f, out.data_ptr<T>(), s.K,
                          s.OCg * s.K, s.G);
  }
}

// float32 and float64 as on the CPU; cuBLAS also takes the 16-bit floats (accumulating in
// float32), so they run here too.
template <template <typename> class F>
void ByDtype(const KernelCall& call) {
  ANVIL_DISPATCH_FLOATING(call.inputs[0].dtype(), op_name(call.op), [&] { F<scalar_t>::Run(call); });
}

template <typename T>
struct Forward {
  static void Run(const KernelCall& c) { Conv2dForward<T>(c); }
};
template <typename T>
struct InputGrad {
  static void Run(const KernelCall& c) { Conv2dInputGrad<T>(c); }
};
template <typename T>
struct WeightGrad {
  static void Run(const KernelCall& c) { Conv2dWeightGrad<T>(c); }
};

}  // namespace

ANVIL_KERNEL_SLOT(Im2Col, Im2ColRowKernel)
ANVIL_KERNEL_SLOT(Col2Im, Col2ImRowKernel)
ANVIL_KERNEL_SLOT(Conv2d, ByDtype<Forward>)
ANVIL_KERNEL_SLOT(Conv2dInputGrad, ByDtype<InputGrad>)
ANVIL_KERNEL_SLOT(Conv2dWeightGrad, ByDtype<WeightGrad>)

}  // namespace anvil::cuda
