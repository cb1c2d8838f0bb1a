// The interface between the binding (ops.cpp) and the per-instruction-set kernels.
// Plain C++ (no torch): the kernels only see raw pointers and index ranges.
#pragma once
#include <cstdint>

namespace reasonserve_native {

// Panels of a [K, N] right-hand side: panel p holds outputs 16p .. 16p+15 as 16
// consecutive floats per k. Full panels are read in place from `b` (row k of panel p
// at b + p * panel_step + k * ldb); the last, partial panel comes from `tail`, a
// zero-padded [K, 16] copy (k stride 16), or is absent.
struct Panels {
  const float* b;
  int64_t ldb, panel_step, full;
  const float* tail;
  const float* at(int64_t p) const { return p < full ? b + p * panel_step : tail; }
  int64_t kstride(int64_t p) const { return p < full ? ldb : 16; }
};

// A paged KV cache [num_blocks, Hkv, block_size, D] with element strides.
struct PagedKV {
  const void* k;
  const void* v;
  int dtype;  // 0 float32, 1 bfloat16, 2 float16
  int64_t s_block, s_head, s_tok, block_size, head_dim;
  const int64_t* tables;  // [B, ld_table]
  int64_t ld_table;
};

// Packed queries: row t of q [T, Hq, D] (float, contiguous) belongs to sequence
// row_seq[t] and sees keys 0 .. row_keys[t] - 1.
struct QueryRows {
  const float* q;
  int64_t heads, group;  // Hq, Hq / Hkv
  const int64_t* row_seq;
  const int64_t* row_keys;
  float scale;
};

struct KernelTable {
  const char* name;
  // acc[m, 16p .. 16p+16) = x[m, :] . panel p, rows [m0, m1), panels [p0, p1)
  void (*linear)(const float* x, int64_t ldx, int64_t K, const Panels& w, float* acc, int64_t ldacc,
                 int64_t m0, int64_t m1, int64_t p0, int64_t p1);
  // rows [r0, r1) of contiguous [R, n] float rows
  void (*rms_norm)(const float* x, int64_t n, float eps, float* out, int64_t r0, int64_t r1);
  void (*softmax)(const float* x, int64_t n, bool log, float* out, int64_t r0, int64_t r1);
  void (*mean)(const float* x, int64_t n, float* out, int64_t r0, int64_t r1);
  // tasks [t0, t1) over (query row, head) = task / Hq, task % Hq; out [T, Hq, D] float
  void (*attention)(const QueryRows& q, const PagedKV& kv, float* out, int64_t t0, int64_t t1);
};

// Defined in kernels_<isa>.cpp; each returns null when this build has no such variant.
const KernelTable* kernels_generic();
const KernelTable* kernels_avx2();
const KernelTable* kernels_avx512();

}  // namespace reasonserve_native
