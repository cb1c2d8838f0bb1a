// The fixed-order kernels of fixed_order.h built for the avx2 instruction set.
// RS_MR (rows per register block), RS_VW (floats per vector) and RS_NPAN (panels per
// one-row pass) only set speed; the bits come from fixed_order.h.
#include "kernel_table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2")
#define RS_ISA avx2
#define RS_ISA_NAME "avx2"
#define RS_MR 6
#define RS_VW 8
#define RS_NPAN 4
#include "fixed_order.h"

const reasonserve_native::KernelTable* reasonserve_native::kernels_avx2() { return &avx2::kTable; }
#else
const reasonserve_native::KernelTable* reasonserve_native::kernels_avx2() { return nullptr; }
#endif
