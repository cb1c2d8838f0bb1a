// torch.library bindings of the fixed-order CPU kernels (namespace `reasonserve`).
//
// Every op takes float32 operands (the Python layer converts half types exactly and
// validates shapes first; the checks here are a second line that turns bad input into
// a RuntimeError, never a crash) and an `isa` index: 0 generic, 1 avx2, 2 avx512. The
// work is split across threads by outputs only (each output is computed by exactly one
// thread, in the order fixed_order.h defines), so thread count never changes a bit.
#include <Python.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kernel_table.h"

namespace reasonserve_native {
namespace {

// Error messages are built with std::to_string, never by streaming integers through
// c10::str's ostream: with torch 2.11 CUDA wheels on an Intel host, every TORCH_CHECK
// whose message formatted an integer crashed the process instead of raising.
inline void append(std::string& s, const char* part) { s += part; }
inline void append(std::string& s, const std::string& part) { s += part; }
inline void append(std::string& s, c10::ScalarType part) { s += c10::toString(part); }
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
void append(std::string& s, T part) { s += std::to_string(part); }

template <typename... Parts>
std::string text(const Parts&... parts) {
  std::string s;
  (append(s, parts), ...);
  return s;
}

bool cpu_has(int isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (isa == 1) return __builtin_cpu_supports("avx2");
  if (isa == 2) return __builtin_cpu_supports("avx512f");
#endif
  return isa == 0;
}

const KernelTable* table_for(int64_t isa) {
  const KernelTable* t = isa == 0 ? kernels_generic() : isa == 1 ? kernels_avx2() : isa == 2 ? kernels_avx512() : nullptr;
  TORCH_CHECK(t != nullptr && cpu_has(static_cast<int>(isa)),
              text("reasonserve native kernels: instruction set ", isa, " is not available on this CPU/build"));
  return t;
}

void check_f32(const at::Tensor& t, const char* name, int64_t ndim) {
  TORCH_CHECK(t.device().is_cpu(), text(name, " must be a CPU tensor"));
  TORCH_CHECK(t.scalar_type() == at::kFloat, text(name, " must be float32, got ", t.scalar_type()));
  TORCH_CHECK(t.dim() == ndim, text(name, " must have ", ndim, " dimensions, got ", t.dim()));
}

std::vector<int64_t> isas() {
  std::vector<int64_t> out;
  for (int isa = 0; isa < 3; ++isa) {
    const KernelTable* t = isa == 0 ? kernels_generic() : isa == 1 ? kernels_avx2() : kernels_avx512();
    if (t != nullptr && cpu_has(isa)) out.push_back(isa);
  }
  return out;
}

at::Tensor run_panels(const at::Tensor& x, const Panels& w, int64_t np, int64_t n, int64_t isa) {
  const KernelTable* kt = table_for(isa);
  const int64_t m = x.size(0), k = x.size(1);
  at::Tensor acc = at::empty({m, np * 16}, x.options());
  const int64_t mb = 96, pb = 8;
  const int64_t row_blocks = (m + mb - 1) / mb, panel_blocks = (np + pb - 1) / pb;
  const float* xp = x.data_ptr<float>();
  float* ap = acc.data_ptr<float>();
  at::parallel_for(0, row_blocks * panel_blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t r = b / panel_blocks, p = b % panel_blocks;
      kt->linear(xp, k, k, w, ap, np * 16, r * mb, std::min(m, (r + 1) * mb), p * pb, std::min(np, (p + 1) * pb));
    }
  });
  return n == np * 16 ? acc : acc.narrow(1, 0, n);
}

// a [E, M, K] @ b [E, K, N], b's rows contiguous, every entry read in place; the
// same kernel and panels as one matmul_rows call per entry (the same bits).
at::Tensor bmm_rows(const at::Tensor& a, const at::Tensor& b, int64_t isa) {
  check_f32(a, "a", 3);
  check_f32(b, "b", 3);
  TORCH_CHECK(a.is_contiguous(), "a must be contiguous");
  TORCH_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2), "a [E, M, K] and b [E, K, N] do not match");
  TORCH_CHECK(b.size(2) <= 1 || b.stride(2) == 1, "b's rows must be contiguous");
  const KernelTable* kt = table_for(isa);
  const int64_t e = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2), full = n / 16, np = (n + 15) / 16;
  at::Tensor tails;
  if (np > full) {  // the last, partial panel of every entry, zero-padded to 16 columns
    tails = at::zeros({e, k, 16}, a.options());
    tails.narrow(2, 0, n - full * 16).copy_(b.narrow(2, full * 16, n - full * 16));
  }
  at::Tensor acc = at::empty({e, m, np * 16}, a.options());
  const int64_t mb = 96, pb = 8, row_blocks = (m + mb - 1) / mb, panel_blocks = (np + pb - 1) / pb;
  const int64_t per_entry = row_blocks * panel_blocks;
  at::parallel_for(0, e * per_entry, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / per_entry, r = (t % per_entry) / panel_blocks, p = t % panel_blocks;
      const float* tail = np > full ? tails.data_ptr<float>() + i * k * 16 : nullptr;
      Panels w{b.data_ptr<float>() + i * b.stride(0), b.stride(1), 16, full, tail};
      kt->linear(a.data_ptr<float>() + i * m * k, k, k, w, acc.data_ptr<float>() + i * m * np * 16, np * 16,
                 r * mb, std::min(m, (r + 1) * mb), p * pb, std::min(np, (p + 1) * pb));
    }
  });
  return n == np * 16 ? acc : acc.narrow(2, 0, n);
}

// x [M, K] @ panels [NP, K, 16] -> [M, n]
at::Tensor linear_packed(const at::Tensor& x, const at::Tensor& panels, int64_t n, int64_t isa) {
  check_f32(x, "x", 2);
  check_f32(panels, "panels", 3);
  TORCH_CHECK(x.is_contiguous() && panels.is_contiguous(), "x and panels must be contiguous");
  const int64_t k = x.size(1), np = panels.size(0);
  TORCH_CHECK(panels.size(1) == k && panels.size(2) == 16, text("panels must be [NP, K, 16] with K = ", k));
  TORCH_CHECK(n >= 0 && n <= np * 16 && n > (np - 1) * 16, "n must lie in (16 (NP - 1), 16 NP]");
  Panels w{panels.data_ptr<float>(), 16, k * 16, np, nullptr};
  return run_panels(x, w, np, n, isa);
}

// a [M, K] @ b [K, N] with b's rows contiguous (b.stride(1) == 1), read in place.
at::Tensor matmul_rows(const at::Tensor& a, const at::Tensor& b, int64_t isa) {
  check_f32(a, "a", 2);
  check_f32(b, "b", 2);
  TORCH_CHECK(b.size(0) == a.size(1), "a and b have mismatched K");
  TORCH_CHECK(b.size(1) <= 1 || b.stride(1) == 1, "b's rows must be contiguous");
  return bmm_rows(a.unsqueeze(0), b.unsqueeze(0), isa).squeeze(0);
}

// A row op over x [R, n] (float32, contiguous): `kernel(table, x, n, out, r0, r1)` on
// row ranges split across threads; out is [R, n], or [R] when `one_per_row`.
template <typename Kernel>
at::Tensor map_rows(const at::Tensor& x, int64_t isa, bool one_per_row, Kernel kernel) {
  check_f32(x, "x", 2);
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  const KernelTable* kt = table_for(isa);
  at::Tensor out = one_per_row ? at::empty({x.size(0)}, x.options()) : at::empty_like(x);
  const int64_t n = x.size(1), grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
  at::parallel_for(0, x.size(0), grain, [&](int64_t r0, int64_t r1) {
    kernel(*kt, x.data_ptr<float>(), n, out.data_ptr<float>(), r0, r1);
  });
  return out;
}

at::Tensor rms_norm(const at::Tensor& x, double eps, int64_t isa) {
  const float e = static_cast<float>(eps);
  return map_rows(x, isa, false, [e](const KernelTable& kt, const float* xp, int64_t n, float* o, int64_t r0,
                                     int64_t r1) { kt.rms_norm(xp, n, e, o, r0, r1); });
}

at::Tensor softmax(const at::Tensor& x, bool log, int64_t isa) {
  return map_rows(x, isa, false, [log](const KernelTable& kt, const float* xp, int64_t n, float* o, int64_t r0,
                                       int64_t r1) { kt.softmax(xp, n, log, o, r0, r1); });
}

at::Tensor mean(const at::Tensor& x, int64_t isa) {
  return map_rows(x, isa, true, [](const KernelTable& kt, const float* xp, int64_t n, float* o, int64_t r0,
                                   int64_t r1) { kt.mean(xp, n, o, r0, r1); });
}

int cache_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kBFloat16: return 1;
    case at::kHalf: return 2;
    default: TORCH_CHECK(false, text("k_cache/v_cache must be float32, bfloat16 or float16, got ", t.scalar_type()));
  }
  return 0;
}

// Every index the kernel will follow stays inside its tensor (a bad table is an
// error here, never an out-of-bounds read).
void check_indices(const at::Tensor& tables, const at::Tensor& row_seq, const at::Tensor& row_keys,
                   int64_t num_blocks, int64_t block_size) {
  const int64_t b = tables.size(0), w = tables.size(1), t = row_seq.size(0);
  const int64_t* tab = tables.data_ptr<int64_t>();
  const int64_t* seq = row_seq.data_ptr<int64_t>();
  const int64_t* keys = row_keys.data_ptr<int64_t>();
  std::vector<int64_t> need(b, 0);  // blocks each sequence's queries read
  for (int64_t i = 0; i < t; ++i) {
    TORCH_CHECK(seq[i] >= 0 && seq[i] < b, text("row_seq[", i, "] = ", seq[i], " is not a sequence index"));
    TORCH_CHECK(keys[i] >= 1 && keys[i] <= w * block_size,
                text("row_keys[", i, "] = ", keys[i], " must lie in [1, ", w * block_size, "]"));
    need[seq[i]] = std::max(need[seq[i]], (keys[i] + block_size - 1) / block_size);
  }
  for (int64_t s = 0; s < b; ++s)
    for (int64_t j = 0; j < need[s]; ++j)
      TORCH_CHECK(tab[s * w + j] >= 0 && tab[s * w + j] < num_blocks,
                  text("tables[", s, ", ", j, "] = ", tab[s * w + j], " is not a block of the cache"));
}

// q [T, Hq, D] float32; caches [num_blocks, Hkv, block_size, D]; tables int64 [B, W];
// row_seq / row_keys int64 [T]: each query row's sequence and visible key count.
at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& tables, const at::Tensor& row_seq, const at::Tensor& row_keys,
                           double scale, int64_t isa) {
  check_f32(q, "q", 3);
  TORCH_CHECK(q.is_contiguous(), "q must be contiguous");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes() && k_cache.strides() == v_cache.strides(),
              "k_cache and v_cache must be 4-d with one shape and layout");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "k_cache and v_cache must share a dtype");
  TORCH_CHECK(k_cache.stride(3) == 1, "the cache's head dimension must be contiguous");
  TORCH_CHECK(q.size(2) == k_cache.size(3), "q's head dim must equal the cache's");
  TORCH_CHECK(k_cache.size(1) > 0 && q.size(1) % k_cache.size(1) == 0, "q heads must be a multiple of cache heads");
  for (const at::Tensor* t : {&tables, &row_seq, &row_keys})
    TORCH_CHECK(t->scalar_type() == at::kLong && t->is_contiguous(), "index tensors must be contiguous int64");
  TORCH_CHECK(tables.dim() == 2 && row_seq.dim() == 1 && row_keys.dim() == 1 &&
                  row_seq.size(0) == q.size(0) && row_keys.size(0) == q.size(0),
              "tables must be [B, W]; row_seq and row_keys [T]");
  check_indices(tables, row_seq, row_keys, k_cache.size(0), k_cache.size(2));
  const KernelTable* kt = table_for(isa);
  PagedKV kv{k_cache.data_ptr(), v_cache.data_ptr(), cache_dtype(k_cache), k_cache.stride(0), k_cache.stride(1),
             k_cache.stride(2), k_cache.size(2), k_cache.size(3), tables.data_ptr<int64_t>(), tables.size(1)};
  QueryRows rows{q.data_ptr<float>(), q.size(1), q.size(1) / k_cache.size(1), row_seq.data_ptr<int64_t>(),
                 row_keys.data_ptr<int64_t>(), static_cast<float>(scale)};
  at::Tensor out = at::empty_like(q);
  at::parallel_for(0, q.size(0) * q.size(1), 1, [&](int64_t t0, int64_t t1) {
    kt->attention(rows, kv, out.data_ptr<float>(), t0, t1);
  });
  return out;
}

}  // namespace
}  // namespace reasonserve_native

TORCH_LIBRARY(reasonserve, m) {
  m.def("isas() -> int[]", &reasonserve_native::isas);
  m.def("linear_packed(Tensor x, Tensor panels, int n, int isa) -> Tensor");
  m.def("matmul_rows(Tensor a, Tensor b, int isa) -> Tensor");
  m.def("bmm_rows(Tensor a, Tensor b, int isa) -> Tensor");
  m.def("rms_norm(Tensor x, float eps, int isa) -> Tensor");
  m.def("softmax(Tensor x, bool log, int isa) -> Tensor");
  m.def("mean(Tensor x, int isa) -> Tensor");
  m.def(
      "paged_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor tables, Tensor row_seq, "
      "Tensor row_keys, float scale, int isa) -> Tensor");
}

TORCH_LIBRARY_IMPL(reasonserve, CPU, m) {
  m.impl("linear_packed", &reasonserve_native::linear_packed);
  m.impl("matmul_rows", &reasonserve_native::matmul_rows);
  m.impl("bmm_rows", &reasonserve_native::bmm_rows);
  m.impl("rms_norm", &reasonserve_native::rms_norm);
  m.impl("softmax", &reasonserve_native::softmax);
  m.impl("mean", &reasonserve_native::mean);
  m.impl("paged_attention", &reasonserve_native::paged_attention);
}

// An importable (empty) Python module: importing it runs the registrations above.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
