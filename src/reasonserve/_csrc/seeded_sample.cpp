// reasonserve::seeded_sample: the fused CPU sampler behind reasonserve.ops.sample.
//
// One pass per row over the vocabulary, in chunks held on the stack: hash, Gumbel
// noise, score and running argmax, with no [rows, vocab] buffer. With one_hot the row
// of `logits` is then rewritten in place (0 at the token, -inf elsewhere), which is how
// the vLLM / SGLang adapters hand the token to the engine's own sampler. Rows are
// split across threads; each row is computed by one thread in a fixed order, so the
// thread count never changes a bit. The generic and avx2 builds of the same source
// give identical bits (no fused multiply-add: -ffp-contract=off).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace reasonserve_sampling {
namespace generic {
#include "seeded_sample.h"
}  // namespace generic

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "seeded_sample.h"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace {

bool use_avx2(int64_t isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return isa >= 1 && __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

void check(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t rows) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 1 && t.size(0) == rows && t.scalar_type() == dtype,
              std::string(name) + " must be a CPU " + c10::toString(dtype) + " tensor of shape [rows]");
}

template <typename T>
int64_t row_token(const T* x, int64_t vocab, const generic::RowParams& p, bool avx2) {
#if defined(__x86_64__)
  if (avx2) {
    avx2::RowParams q{p.state, p.temperature, p.threshold};
    return avx2::sample_row(x, vocab, q);
  }
#endif
  return generic::sample_row(x, vocab, p);
}

template <typename T>
void write_one_hot(T* x, int64_t vocab, int64_t token) {
  const T minus_inf = static_cast<T>(-__builtin_inf());
  for (int64_t j = 0; j < vocab; ++j) x[j] = minus_inf;
  x[token] = static_cast<T>(0.0);
}

at::Tensor seeded_sample(at::Tensor logits, const at::Tensor& rows, const at::Tensor& active,
                         const at::Tensor& state, const at::Tensor& temperature, const at::Tensor& threshold,
                         bool one_hot, int64_t isa) {
  TORCH_CHECK(logits.device().is_cpu() && logits.dim() == 2 && logits.stride(1) == 1,
              "logits must be a CPU [N, V] tensor with contiguous rows");
  const int64_t n = rows.numel(), vocab = logits.size(1), num_rows = logits.size(0);
  check(rows, "rows", at::kLong, n);
  check(active, "active", at::kBool, n);
  check(state, "state", at::kLong, n);
  check(temperature, "temperature", at::kDouble, n);
  check(threshold, "threshold", at::kDouble, n);
  auto out = at::empty({n}, rows.options());
  const int64_t* row = rows.data_ptr<int64_t>();
  const bool* on = active.data_ptr<bool>();
  const int64_t* st = state.data_ptr<int64_t>();
  const double* temp = temperature.data_ptr<double>();
  const double* thr = threshold.data_ptr<double>();
  int64_t* tok = out.data_ptr<int64_t>();
  const bool avx2 = use_avx2(isa);
  const int64_t ld = logits.stride(0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "seeded_sample", [&] {
    scalar_t* base = logits.data_ptr<scalar_t>();
    at::parallel_for(0, n, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        if (!on[i]) { tok[i] = -2; continue; }
        if (row[i] < 0 || row[i] >= num_rows) { tok[i] = -3; continue; }  // BAD_ROW: nothing touched
        generic::RowParams p{static_cast<uint32_t>(st[i]), temp[i], thr[i]};
        scalar_t* x = base + row[i] * ld;
        tok[i] = row_token<scalar_t>(x, vocab, p, avx2);
        if (one_hot && tok[i] >= 0) write_one_hot(x, vocab, tok[i]);
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace reasonserve_sampling

TORCH_LIBRARY_FRAGMENT(reasonserve, m) {
  m.def("seeded_sample(Tensor(a!) logits, Tensor rows, Tensor active, Tensor state, Tensor temperature, "
        "Tensor threshold, bool one_hot, int isa) -> Tensor");
}

TORCH_LIBRARY_IMPL(reasonserve, CPU, m) { m.impl("seeded_sample", &reasonserve_sampling::seeded_sample); }
