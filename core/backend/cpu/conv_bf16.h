// Convolutions on bfloat16 through the bfloat16 GEMM (bf16_gemm.h): autocast's conv2d and its
// two gradient rows, where the CPU has AVX-512-BF16. The forward takes oneDNN's bf16
// convolution instead where it measured faster (6 or more input channels per group; every
// shape at the amx level) or ANVIL_BF16_GEMM=onednn forces it (conv_bf16.cc,
// onednn_primitives.h), so those convolutions are no longer widened to float32.
#pragma once

#include "core/backend/registry.h"

namespace anvil::cpu {

// Runs the Conv2d, Conv2dInputGrad or Conv2dWeightGrad call `c` on the bfloat16 GEMM (or the
// forward on oneDNN) and returns true; returns false, touching nothing, when it does not apply (no bf16_gemm here,
// an operand that is not bfloat16, an empty dimension, or a per-image product too small to
// gain: see kMinImageProduct), and the caller widens to float32.
bool Conv2dOnBf16Gemm(const KernelCall& c);

}  // namespace anvil::cpu
