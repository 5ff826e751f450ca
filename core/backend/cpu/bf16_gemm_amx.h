// A bfloat16 GEMM on AMX tiles (Intel Sapphire Rapids and later: tdpbf16ps multiplies a 16 x 32
// bf16 tile by a 32 x 16 one into a 16 x 16 float32 tile, 16 times vdpbf16ps's work per
// instruction). bf16_gemm (bf16_gemm.h) takes it where amx_bf16_gemm_available() says so, with
// the same contract; the AVX-512-BF16 kernel stays the path elsewhere.
//
// The kernel is written once over a tile-operations policy: the AMX instructions, and an
// emulation of them written from the instruction set reference's pseudo-code (tile loads and
// stores row by row at a byte stride; tdpbf16ps's even and odd products accumulated apart by
// float32 FMAs and then added to C, denormal inputs read as zero, denormal results flushed). The emulation lets the
// packing, blocking and edge logic be tested on any CPU with AVX-512 (tests/core/bf16_gemm_test.cc); on an AMX CPU the
// same tests run on the hardware, and the first use checks the hardware kernel against float64 on a product with edges
// in every direction, falling back to AVX-512-BF16 (and saying why) if it disagrees.
#pragma once

#include <cstdint>
#include <string>

namespace anvil::cpu {

// Whether bf16_gemm takes the AMX kernel: the active ISA level is amx (the CPU has AMX-TILE and
// AMX-BF16, the OS saves tile state and Linux granted this process the tile permission) and the
// kernel passed its check on this CPU.
bool amx_bf16_gemm_available();

// Why amx_bf16_gemm_available() is false ("" when it is true).
std::string amx_bf16_gemm_unavailable_reason();

// bf16_gemm's contract (bf16_gemm.h) on AMX tiles. Requires amx_bf16_gemm_available().
void amx_bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                   int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);

// The same kernel on emulated tiles (slow: for tests on CPUs without AMX). Requires AVX-512 BW
// (the B packing is shared with the AVX-512-BF16 kernel).
void amx_bf16_gemm_emulated(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                            const uint16_t* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);

}  // namespace anvil::cpu
