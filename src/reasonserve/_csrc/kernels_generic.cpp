// The fixed-order kernels of fixed_order.h built for the generic instruction set.
// RS_MR (rows per register block) only sets speed; the bits come from fixed_order.h.
#include "kernel_table.h"

#if 1

#define RS_ISA generic
#define RS_ISA_NAME "generic"
#define RS_MR 3
#define RS_VW 4
#include "fixed_order.h"

const reasonserve_native::KernelTable* reasonserve_native::kernels_generic() { return &generic::kTable; }
#else
const reasonserve_native::KernelTable* reasonserve_native::kernels_generic() { return nullptr; }
#endif
