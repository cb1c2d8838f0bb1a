// reasonserve's fixed-order CPU kernels: the one source of every native reduction.
//
// This header is compiled once per instruction set (kernels_generic.cpp,
// kernels_avx2.cpp, kernels_avx512.cpp), each time inside its own namespace, and the
// binding picks one at run time. Every variant must give IDENTICAL BITS, so the order
// of every floating-point operation is part of the definition, never the hardware's:
//
// * Products (linear / matmul / bmm): out[m][n] is one in-order chain over k,
//   acc = 0; for k = 0..K-1: acc = acc + x[m][k] * w[n][k], a rounded multiply then a
//   rounded add (no fused multiply-add: every file is compiled with
//   -ffp-contract=off). Vectors run across 16 independent outputs n (a "panel"),
//   never across k; blocking over rows, panels or k only changes which outputs are
//   computed when, never the order of one output's operations.
// * Row reductions (sum of squares, sum of exponentials, mean, dot products over a
//   head dimension): 16 interleaved lanes, lane j adds elements j, j+16, j+32, ... in
//   order, then the lanes are folded by a fixed tree (j += j+8, j += j+4, j += j+2,
//   j += j+1). 16 is part of the definition, not the vector width: a 4-wide, 8-wide or
//   16-wide machine computes the same 16 lanes.
// * Softmax: m = max (exact in any order; a zero maximum is +0); e_i = exp_neg(x_i - m);
//   total = sum16(e); out_i = e_i * (1 / total); log_softmax: (x_i - m) - log_fixed(total).
// * Attention: scores s_j = dot16(q, k_j) * scale; m = max_j s_j (exact in any order);
//   p_j = exp_neg(s_j - m); denom = sum16(p); out[d] = (chain over j in order of
//   p_j * v_j[d]) / denom. A query sees keys 0..pos (causal) and reads nothing else.
// * exp_neg / log_fixed use only IEEE basic operations (+ - * /, exact scaling by
//   powers of two, nearbyint), so no libm implementation choice can change a bit.
//
// Nothing here depends on torch; the binding (ops.cpp) owns threads and tensors.
// Only compiler builtins and code of our own appear below (no std:: templates or
// inline library functions): every function here is internal to its instruction-set
// namespace, so the linker can never hand one variant's code to another.

#include <cstdint>

#include "kernel_table.h"

namespace reasonserve_native {
namespace RS_ISA {

constexpr int kLanes = 16;
// RS_VW floats per hardware vector (4, 8 or 16): a 16-lane group is kNv vectors. It
// sets speed only: lane j of a group is the same chain whatever the width.
typedef float vf __attribute__((vector_size(RS_VW * 4)));
constexpr int kNv = kLanes / RS_VW;

static inline vf loadv(const float* p) {
  vf v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

static inline void storev(float* p, vf v) { __builtin_memcpy(p, &v, sizeof(v)); }

typedef int32_t vi __attribute__((vector_size(RS_VW * 4)));

static inline vf splat(float s) {  // every lane = s (a broadcast)
  vf v = {s};
  vi first = {};
  return __builtin_shuffle(v, first);
}

// ---- element loaders (exact conversions to float) ---------------------------------
static inline float load_f32(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }

static inline float load_bf16(const void* p, int64_t i) {
  uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

static inline float load_f16(const void* p, int64_t i) {
  uint16_t h = static_cast<const uint16_t*>(p)[i];
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal half: normalise (exact)
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    bits = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

template <int DT>  // 0 f32, 1 bf16, 2 f16
static inline float load(const void* p, int64_t i) {
  return DT == 1 ? load_bf16(p, i) : (DT == 2 ? load_f16(p, i) : load_f32(p, i));
}

// ---- fixed-order reductions ------------------------------------------------------
static inline float fold16(float* lanes) {
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] = lanes[j] + lanes[j + w];
  return lanes[0];
}

// sum_i f(v[i]) in the 16-lane order; kind 0: v[i], 1: v[i] * v[i].
static inline float sum16(const float* v, int64_t n, int kind) {
  vf acc[kNv];
  for (int u = 0; u < kNv; ++u) acc[u] = splat(0.0f);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int u = 0; u < kNv; ++u) {
      vf x = loadv(v + i + u * RS_VW);
      acc[u] = acc[u] + (kind ? x * x : x);
    }
  }
  float lanes[kLanes];
  for (int u = 0; u < kNv; ++u) storev(lanes + u * RS_VW, acc[u]);
  for (int j = 0; i + j < n; ++j) {
    float x = v[i + j];
    lanes[j] = lanes[j] + (kind ? x * x : x);
  }
  return fold16(lanes);
}

// dot(a, b) over n elements (b of element type DT), in the 16-lane order.
template <int DT>
static inline float dot16(const float* a, const void* b, int64_t n) {
  float lanes[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] = lanes[j] + a[i + j] * load<DT>(b, i + j);
  for (int j = 0; i + j < n; ++j) lanes[j] = lanes[j] + a[i + j] * load<DT>(b, i + j);
  return fold16(lanes);
}

// ---- exp / log from IEEE basic operations ----------------------------------------
static inline double pow2(int n) {  // exact 2^n for -1022 <= n <= 1023
  uint64_t bits = static_cast<uint64_t>(n + 1023) << 52;
  double d;
  __builtin_memcpy(&d, &bits, sizeof(d));
  return d;
}

// e^x for x <= 0 (the only arguments softmax and attention ever pass: x - max).
// Branch-free, float-only, every step an IEEE basic operation: Cody-Waite reduction
// x = n ln2 + r with n = round(x log2 e), a degree-6 polynomial for e^r (the
// classic Cephes expf coefficients), then an exact scaling by 2^n built from bits.
// x < -86 gives 0 (so no subnormal is ever produced), NaN stays NaN, -inf gives 0.
static inline float exp_neg(float x) {
  const float xc = x < -86.0f ? -86.0f : (x > 0.0f ? 0.0f : x);
  // round to nearest even by adding and removing 1.5 * 2^23 (exact for |v| < 2^22)
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  const float y = x < -86.0f ? 0.0f : p * scale;
  return x != x ? x : y;
}

// exp_neg on a vector: the same operations lane by lane (identical bits).
static inline vf exp_neg_v(vf x) {
  const vf lo = splat(-86.0f), zero = splat(0.0f);
  const vf xc = x < lo ? lo : (x > zero ? zero : x);
  const vf n = (xc * splat(1.44269504088896341f) + splat(12582912.0f)) - splat(12582912.0f);
  const vf r = (xc - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
  vf p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = (p * r) * r + r + splat(1.0f);
  const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  vf scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  const vf y = x < lo ? zero : p * scale;
  return x != x ? x : y;
}

// natural log of a finite x >= 1 (a sum of exponentials whose largest term is 1).
static inline double log_fixed(double x) {
  if (!(x < __builtin_inff())) return x;  // NaN or +inf
  int e = 0;
  double m = __builtin_frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.7071067811865476) {
    m = m * 2.0;
    e -= 1;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  double p = 1.0 / 19.0;
  for (int k = 17; k >= 3; k -= 2) p = 1.0 / k + s2 * p;
  return 2.0 * s + 2.0 * s * (s2 * p) + e * 0.6931471805599453;
}

// ---- products --------------------------------------------------------------------
template <int MR>
static inline void micro(const float* x, int64_t ldx, const float* w, int64_t wk, int64_t k0, int64_t k1,
                         float* acc, int64_t ldacc, bool first) {
  vf a[MR][kNv];
  for (int r = 0; r < MR; ++r)
    for (int u = 0; u < kNv; ++u) a[r][u] = first ? splat(0.0f) : loadv(acc + r * ldacc + u * RS_VW);
  for (int64_t k = k0; k < k1; ++k) {
    vf wv[kNv];
    for (int u = 0; u < kNv; ++u) wv[u] = loadv(w + k * wk + u * RS_VW);
    for (int r = 0; r < MR; ++r) {
      vf xb = splat(x[r * ldx + k]);
      for (int u = 0; u < kNv; ++u) a[r][u] = a[r][u] + xb * wv[u];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int u = 0; u < kNv; ++u) storev(acc + r * ldacc + u * RS_VW, a[r][u]);
}

// One row against RS_NPAN panels at once: for a few rows the weights stream through
// once, and each k reads RS_NPAN * 16 neighbouring floats (one run in a row-major b).
static inline void micro_wide(const float* x, const Panels& w, int64_t p, int64_t k0, int64_t k1, float* acc,
                              bool first) {
  vf a[RS_NPAN][kNv];
  const float* wp[RS_NPAN];
  int64_t wk[RS_NPAN];
  for (int q = 0; q < RS_NPAN; ++q) {
    wp[q] = w.at(p + q);
    wk[q] = w.kstride(p + q);
    for (int u = 0; u < kNv; ++u) a[q][u] = first ? splat(0.0f) : loadv(acc + (p + q) * kLanes + u * RS_VW);
  }
  for (int64_t k = k0; k < k1; ++k) {
    vf xb = splat(x[k]);
    for (int q = 0; q < RS_NPAN; ++q)
      for (int u = 0; u < kNv; ++u) a[q][u] = a[q][u] + xb * loadv(wp[q] + k * wk[q] + u * RS_VW);
  }
  for (int q = 0; q < RS_NPAN; ++q)
    for (int u = 0; u < kNv; ++u) storev(acc + (p + q) * kLanes + u * RS_VW, a[q][u]);
}

// k is blocked (kKc) so a panel's slice stays in cache across row blocks; the
// partial sums wait in `acc` between blocks, so each output is still one chain.
constexpr int64_t kKc = 256;

template <int MR>
static void panels_by_rows(const float* x, int64_t ldx, const Panels& w, float* acc, int64_t ldacc, int64_t m0,
                           int64_t m1, int64_t p0, int64_t p1, int64_t k0, int64_t k1) {
  for (int64_t p = p0; p < p1; ++p) {
    const float* wp = w.at(p);
    int64_t wk = w.kstride(p);
    int64_t m = m0;
    for (; m + MR <= m1; m += MR)
      micro<MR>(x + m * ldx, ldx, wp, wk, k0, k1, acc + m * ldacc + p * kLanes, ldacc, k0 == 0);
    for (; m < m1; ++m)
      micro<1>(x + m * ldx, ldx, wp, wk, k0, k1, acc + m * ldacc + p * kLanes, ldacc, k0 == 0);
  }
}

static void rows_by_panels(const float* x, int64_t ldx, const Panels& w, float* acc, int64_t ldacc, int64_t m0,
                           int64_t m1, int64_t p0, int64_t p1, int64_t k0, int64_t k1) {
  for (int64_t m = m0; m < m1; ++m) {
    int64_t p = p0;
    for (; p + RS_NPAN <= p1; p += RS_NPAN) micro_wide(x + m * ldx, w, p, k0, k1, acc + m * ldacc, k0 == 0);
    for (; p < p1; ++p)
      micro<1>(x + m * ldx, ldx, w.at(p), w.kstride(p), k0, k1, acc + m * ldacc + p * kLanes, ldacc, k0 == 0);
  }
}

static void linear_range(const float* x, int64_t ldx, int64_t K, const Panels& w, float* acc, int64_t ldacc,
                         int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  int64_t k0 = 0;
  do {
    int64_t k1 = k0 + kKc < K ? k0 + kKc : K;
    if (m1 - m0 < RS_MR) rows_by_panels(x, ldx, w, acc, ldacc, m0, m1, p0, p1, k0, k1);
    else panels_by_rows<RS_MR>(x, ldx, w, acc, ldacc, m0, m1, p0, p1, k0, k1);
    k0 = k1;
  } while (k0 < K);
}

// ---- row ops -----------------------------------------------------------------------
// out = x * (1 / sqrt(sum16(x*x) / n + eps)), rows [r0, r1).
static void rms_norm_rows(const float* x, int64_t n, float eps, float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * n;
    float var = n ? sum16(row, n, 1) / static_cast<float>(n) : 0.0f;
    float inv = 1.0f / __builtin_sqrtf(var + eps);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = row[i] * inv;
  }
}

// The row's maximum, or NaN when the row holds one (then every output is NaN).
static inline float max_row(const float* x, int64_t n) {
  float m = -__builtin_inff();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    nan = nan | (x[i] != x[i]);
    m = x[i] > m ? x[i] : m;
  }
  return nan ? __builtin_nanf("") : m + 0.0f;  // + 0: a zero maximum is +0 whatever lane saw it
}

// e_i = exp_neg(x_i - m) written to out and summed in the 16-lane order, one pass.
static inline float exp_sum16(const float* x, int64_t n, float m, float* out) {
  vf acc[kNv];
  for (int u = 0; u < kNv; ++u) acc[u] = splat(0.0f);
  const vf mv = splat(m);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int u = 0; u < kNv; ++u) {
      vf e = exp_neg_v(loadv(x + i + u * RS_VW) - mv);
      storev(out + i + u * RS_VW, e);
      acc[u] = acc[u] + e;
    }
  }
  float lanes[kLanes];
  for (int u = 0; u < kNv; ++u) storev(lanes + u * RS_VW, acc[u]);
  for (int j = 0; i + j < n; ++j) {
    out[i + j] = exp_neg(x[i + j] - m);
    lanes[j] = lanes[j] + out[i + j];
  }
  return fold16(lanes);
}

static void softmax_rows(const float* x, int64_t n, bool log, float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * n;
    float* dst = out + r * n;
    float m = max_row(row, n);
    float total = exp_sum16(row, n, m, dst);
    if (log) {
      float lt = static_cast<float>(log_fixed(static_cast<double>(total)));
      for (int64_t i = 0; i < n; ++i) dst[i] = (row[i] - m) - lt;
    } else {
      const float inv = 1.0f / total;
      for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] * inv;
    }
  }
}

static void mean_rows(const float* x, int64_t n, float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) out[r] = sum16(x + r * n, n, 0) / static_cast<float>(n);
}

// ---- attention ---------------------------------------------------------------------
// One query row of one head over keys 0..n-1 (see the header comment for the order).
template <int DT>
static void attend(const float* q, const PagedKV& kv, const int64_t* table, int64_t h, int64_t n,
                   float scale, float* scores, float* out) {
  const int64_t d = kv.head_dim;
  float m = -__builtin_inff();
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = table[j / kv.block_size] * kv.s_block + h * kv.s_head + (j % kv.block_size) * kv.s_tok;
    float s = dot16<DT>(q, static_cast<const char*>(kv.k) + off * (DT ? 2 : 4), d) * scale;
    scores[j] = s;
    if (s != s || m != m) m = s != s ? s : m;
    else m = s > m ? s : m;
  }
  float denom = exp_sum16(scores, n, m, scores);
  for (int64_t c = 0; c < d; ++c) out[c] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = table[j / kv.block_size] * kv.s_block + h * kv.s_head + (j % kv.block_size) * kv.s_tok;
    const void* vp = static_cast<const char*>(kv.v) + off * (DT ? 2 : 4);
    float p = scores[j];
    for (int64_t c = 0; c < d; ++c) out[c] = out[c] + p * load<DT>(vp, c);
  }
  for (int64_t c = 0; c < d; ++c) out[c] = out[c] / denom;
}

template <int DT>
static void attention_tasks(const QueryRows& q, const PagedKV& kv, float* out, int64_t t0, int64_t t1) {
  const int64_t d = kv.head_dim;
  int64_t most = 1;
  for (int64_t task = t0; task < t1; ++task) most = q.row_keys[task / q.heads] > most ? q.row_keys[task / q.heads] : most;
  float* scores = new float[most];
  for (int64_t task = t0; task < t1; ++task) {
    int64_t t = task / q.heads, h = task % q.heads;
    const int64_t* table = kv.tables + q.row_seq[t] * kv.ld_table;
    attend<DT>(q.q + task * d, kv, table, h / q.group, q.row_keys[t], q.scale, scores, out + task * d);
  }
  delete[] scores;
}

static void attention_rows(const QueryRows& q, const PagedKV& kv, float* out, int64_t t0, int64_t t1) {
  if (kv.dtype == 1) attention_tasks<1>(q, kv, out, t0, t1);
  else if (kv.dtype == 2) attention_tasks<2>(q, kv, out, t0, t1);
  else attention_tasks<0>(q, kv, out, t0, t1);
}

static void linear_rows(const float* x, int64_t ldx, int64_t K, const Panels& w, float* acc, int64_t ldacc,
                        int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  linear_range(x, ldx, K, w, acc, ldacc, m0, m1, p0, p1);
}

static const KernelTable kTable = {RS_ISA_NAME, linear_rows, rms_norm_rows, softmax_rows, mean_rows,
                                   attention_rows};

}  // namespace RS_ISA
}  // namespace reasonserve_native
