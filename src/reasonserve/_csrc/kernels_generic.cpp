// The fixed-order kernels of fixed_order.h built for the baseline instruction set of
// the target (SSE2 on x86-64; whatever the compiler targets elsewhere): always built.
// RS_MR (rows per register block), RS_VW (floats per vector) and RS_NPAN (panels per
// one-row pass) only set speed; the bits come from fixed_order.h.
#include "kernel_table.h"

#define RS_ISA generic
#define RS_ISA_NAME "generic"
#define RS_MR 3
#define RS_VW 4
#define RS_NPAN 2
#include "fixed_order.h"

const reasonserve_native::KernelTable* reasonserve_native::kernels_generic() { return &generic::kTable; }
