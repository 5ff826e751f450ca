// The bfloat16 GEMMs' shared B packing (bf16_gemm.cc defines it; bf16_gemm_amx.cc uses it too).
// Internal to core/backend/cpu.
#pragma once

#include <cstdint>

namespace anvil::cpu::packing {

// B rows p0 .. p0+kc into 32-column panels of bf16 pairs: panel j0/32 starts at
// out + (j0/32) * panel_pairs * 32, and its word q * 32 + j holds B(p0+2q, j0+j) in the low half
// and B(p0+2q+1, j0+j) in the high half (the operand layout of both vdpbf16ps and AMX's
// tdpbf16ps). Columns past n, the missing row of an odd kc and pair rows kc2 .. panel_pairs
// (kc2 = ceil(kc/2) <= panel_pairs) are zero. Needs AVX-512 BW.
void PackBPairs(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t p0, int64_t kc, int64_t n, int64_t panel_pairs,
                uint32_t* out);

}  // namespace anvil::cpu::packing
