// The seeded sampler of reasonserve.ops.sample for one row, included once per
// instruction set by seeded_sample.cpp (inside a namespace, after <cstdint>/<cstring>).
// It computes, in this order, exactly what reasonserve/ops/_hash.py defines with torch
// ops: every floating-point step is one IEEE-754 add, subtract, multiply or divide
// (correctly rounded; the build has -ffp-contract=off, so no fused multiply-add), so
// the bits do not depend on the instruction set, the thread or the batch.

constexpr int64_t kChunk = 2048;  // columns per pass; the scratch stays in L1/L2
constexpr double kLn2 = 0.6931471805599453;
constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kTwo52 = 4503599627370496.0;
constexpr uint64_t kExpBits = 0x4330000000000000ull;  // the bits of 2**52

inline uint64_t bits_of(double x) { uint64_t b; std::memcpy(&b, &x, 8); return b; }
inline double from_bits(uint64_t b) { double x; std::memcpy(&x, &b, 8); return x; }
inline uint32_t rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

inline uint32_t mix(uint32_t h, uint32_t word) {
  uint32_t k = rotl(word * 0xCC9E2D51u, 15) * 0x1B873593u;
  h = rotl(h ^ k, 13);
  return h * 5u + 0xE6546B64u;
}

inline uint32_t column_hash(uint32_t state, uint32_t column) {
  uint32_t h = mix(state, column) ^ 16u;
  h = (h ^ (h >> 16)) * 0x85EBCA6Bu;
  h = (h ^ (h >> 13)) * 0xC2B2AE35u;
  return h ^ (h >> 16);
}

// _hash.log64: x = 2**e * m, m in [sqrt(1/2), sqrt(2)); 2 atanh(f / (2 + f)), f = m - 1.
inline double log64(double x) {
  uint64_t b = bits_of(x);
  double m = from_bits((b & ((1ull << 52) - 1)) | (1023ull << 52));
  double e = from_bits((b >> 52) | kExpBits) - kTwo52 - 1023.0;  // the exponent, exactly
  bool big = m > kSqrt2;
  m = big ? m * 0.5 : m;
  e = big ? e + 1.0 : e;
  double f = m - 1.0;
  double s = f / (f + 2.0);
  double z = s * s;
  double r = 1.0 / 21.0;
  r = r * z + 1.0 / 19.0;
  r = r * z + 1.0 / 17.0;
  r = r * z + 1.0 / 15.0;
  r = r * z + 1.0 / 13.0;
  r = r * z + 1.0 / 11.0;
  r = r * z + 1.0 / 9.0;
  r = r * z + 1.0 / 7.0;
  r = r * z + 1.0 / 5.0;
  r = r * z + 1.0 / 3.0;
  double two_s = s + s;
  return e * kLn2 + (two_s + (two_s * z) * r);
}

inline double gumbel(uint32_t h) {
  double u = (from_bits(kExpBits | h) - kTwo52 + 0.5) / 4294967296.0;  // (h + 0.5) / 2**32
  return -log64(-log64(u));
}

struct RowParams {
  uint32_t state;  // murmur3 state after seed low, seed high, position
  double temperature;  // 0: greedy
  double threshold;  // candidates have logits / temperature >= threshold
};

// Scores of columns [c0, c0 + n): NaN where the logit is NaN, -inf outside the
// candidates, else logit / temperature + noise (greedy: the logit).
template <typename T>
void score_chunk(const T* x, int64_t c0, int64_t n, const RowParams& p, double* out) {
  uint32_t h[kChunk];
  if (p.temperature == 0.0) {
    for (int64_t j = 0; j < n; ++j) out[j] = static_cast<double>(static_cast<float>(x[c0 + j]));
    return;
  }
  for (int64_t j = 0; j < n; ++j) h[j] = column_hash(p.state, static_cast<uint32_t>(c0 + j));
  const double inf = __builtin_inf();
  for (int64_t j = 0; j < n; ++j) {
    double v = static_cast<double>(static_cast<float>(x[c0 + j]));
    double s = v / p.temperature;
    double scored = s + gumbel(h[j]);
    out[j] = v != v ? v : (s >= p.threshold ? scored : -inf);
  }
}

template <>
inline void score_chunk<double>(const double* x, int64_t c0, int64_t n, const RowParams& p, double* out) {
  uint32_t h[kChunk];
  if (p.temperature == 0.0) {
    for (int64_t j = 0; j < n; ++j) out[j] = x[c0 + j];
    return;
  }
  for (int64_t j = 0; j < n; ++j) h[j] = column_hash(p.state, static_cast<uint32_t>(c0 + j));
  const double inf = __builtin_inf();
  for (int64_t j = 0; j < n; ++j) {
    double v = x[c0 + j];
    double s = v / p.temperature;
    double scored = s + gumbel(h[j]);
    out[j] = v != v ? v : (s >= p.threshold ? scored : -inf);
  }
}

// The row's token: the first NaN column if any, else the first column of the highest
// score, or -1 when every score is -inf (nothing can be sampled).
template <typename T>
int64_t sample_row(const T* x, int64_t vocab, const RowParams& p) {
  double scores[kChunk];
  double best = -__builtin_inf();
  int64_t token = -1;
  for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
    int64_t n = vocab - c0 < kChunk ? vocab - c0 : kChunk;
    score_chunk(x, c0, n, p, scores);
    for (int64_t j = 0; j < n; ++j) {
      double v = scores[j];
      if (v != v) return c0 + j;
      if (v > best) { best = v; token = c0 + j; }
    }
  }
  return token;
}
