// Multi-tensor apply: one kernel launch updates many tensors (the fused optimizer steps).
//
// NOTE [ Multi-tensor apply ]
// A model has tens to hundreds of parameters, many small; one launch per parameter and per
// arithmetic op would leave the GPU waiting on the host. Here the launch's argument block
// carries up to TensorListArgs::kMaxTensors tensors (the address of each in every list, and
// its length) and a table giving each CUDA block its (tensor, chunk of kChunk elements). The
// block walks its chunk with a block-stride loop, so accesses coalesce. Kernel arguments are
// limited to 4 KiB, which sizes the tables; a longer list takes several launches, a tensor
// whose chunks span two launches is carried into the next one.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"
#include "core/tensor/tensor.h"

namespace anvil::cuda {

constexpr int64_t kMultiTensorChunk = 65536;
constexpr int kMultiTensorThreads = 512;

template <int Depth>
struct TensorListArgs {
  static constexpr int kMaxTensors = Depth <= 1 ? 110 : Depth == 2 ? 64 : Depth == 3 ? 48 : Depth == 4 ? 36 : 30;
  static constexpr int kMaxBlocks = 320;
  void* addresses[Depth][kMaxTensors];
  int64_t numels[kMaxTensors];
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};
static_assert(sizeof(TensorListArgs<6>) < 3584 && sizeof(TensorListArgs<2>) < 3584,
              "the argument block must leave room for the body in 4 KiB of kernel parameters");

// body(pointers, i): pointers[k] is the tensor's base address in list k; i the element.
template <int Depth, typename Body>
__global__ void __launch_bounds__(kMultiTensorThreads) MultiTensorKernel(TensorListArgs<Depth> args, Body body) {
  const int t = args.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(args.block_chunk[blockIdx.x]) * kMultiTensorChunk;
  const int64_t n = args.numels[t];
  const int64_t end = begin + kMultiTensorChunk < n ? begin + kMultiTensorChunk : n;
  void* pointers[Depth];
#pragma unroll
  for (int k = 0; k < Depth; ++k) pointers[k] = args.addresses[k][t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) body(pointers, i);
}

// Runs body over every element of the Depth lists in `inputs` (list k is inputs[k*n .. k*n+n),
// the tensors of one position have the same number of elements and are contiguous), on the
// calling thread's current stream of `device`.
template <int Depth, typename Body>
void MultiTensorApply(const std::vector<Tensor>& inputs, int device, const Body& body) {
  using Args = TensorListArgs<Depth>;
  const size_t n = inputs.size() / Depth;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  Args args;
  int tensors = 0, blocks = 0;
  auto launch = [&] {
    MultiTensorKernel<Depth><<<blocks, kMultiTensorThreads, 0, stream>>>(args, body);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    blocks = 0;
  };
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = inputs[i].numel();
    if (numel == 0) continue;
    int slot = tensors++;
    for (int k = 0; k < Depth; ++k) args.addresses[k][slot] = inputs[static_cast<size_t>(k) * n + i].data_ptr();
    args.numels[slot] = numel;
    const int64_t chunks = (numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      args.block_tensor[blocks] = static_cast<unsigned char>(slot);
      args.block_chunk[blocks] = static_cast<int>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == Args::kMaxBlocks || (tensors == Args::kMaxTensors && last_chunk)) {
        launch();
        if (last_chunk) {
          tensors = 0;
        } else {  // the rest of this tensor's chunks go with the next launch, from slot 0
          for (int k = 0; k < Depth; ++k) args.addresses[k][0] = args.addresses[k][slot];
          args.numels[0] = numel;
          slot = 0;
          tensors = 1;
        }
      }
    }
  }
  if (blocks > 0) launch();
}

}  // namespace anvil::cuda
