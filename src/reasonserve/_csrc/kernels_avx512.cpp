// The fixed-order kernels of fixed_order.h built for the avx512 instruction set.
// RS_MR (rows per register block), RS_VW (floats per vector) and RS_NPAN (panels per
// one-row pass) only set speed; the bits come from fixed_order.h.
#include "kernel_table.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f")
#define RS_ISA avx512
#define RS_ISA_NAME "avx512"
#define RS_MR 12
#define RS_VW 16
#define RS_NPAN 8
#include "fixed_order.h"

const reasonserve_native::KernelTable* reasonserve_native::kernels_avx512() { return &avx512::kTable; }
#else
const reasonserve_native::KernelTable* reasonserve_native::kernels_avx512() { return nullptr; }
#endif
