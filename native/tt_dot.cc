// The TT dot products: TT with TT, TT with dense data, dense with dense, each kept within
// float64's range by powers of two (the Scaled results), and their folding to a double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "threads.h"
#include "tt.h"
#include "tt_chain.h"
#include "tt_util.h"

namespace svc {

using namespace tt_detail;

Scaled fold(double m, long e) {
  if (m == 0 || !std::isfinite(m)) return {m, 0};
  int k = 0;
  const double f = std::frexp(m, &k);
  const long t = e + k;
  if (t > -1000 && t < 1000) return {std::ldexp(f, int(t)), 0};
  return {f, int(std::clamp<long>(t, -100000, 100000))};
}

double unfold(Scaled s) {
  if (s.e == 0) return s.m;
  // two steps, so that 2^e itself need not be a float64
  const int e1 = s.e / 2;
  return std::ldexp(std::ldexp(s.m, e1), s.e - e1);
}

namespace {

// One pass of the contraction, the running matrix V kept near 1 by powers of two (their sum in
// e). On the data as they are (strict false) it fails (false) where V overflows or falls below
// 2^-900; on scaled cores (strict true) it always answers.
template <typename TA, typename TB>
bool dot_pass(const std::vector<const TA*>& a, const std::vector<size_t>& ra, const std::vector<const TB*>& b,
              const std::vector<size_t>& rb, const std::vector<size_t>& modes, bool strict, double& m, long& e) {
  std::vector<double> V{1.0}, W, V2;
  for (size_t k = 0; k < modes.size(); ++k) {
    size_t n = modes[k], a0 = ra[k], a1 = ra[k + 1], b0 = rb[k], b1 = rb[k + 1];
    W.resize(a0 * n * b1);
    gemm<double, TB, double>(a0, n * b1, b0, V.data(), b0, 1, b[k], n * b1, 1, W.data(), n * b1, false);
    V2.resize(a1 * b1);
    gemm<TA, double, double>(a1, b1, a0 * n, a[k], 1, a1, W.data(), b1, 1, V2.data(), b1, false);
    const double mx = max_abs_of(V2.data(), V2.size());
    if (!strict && !(mx >= kTiny && std::isfinite(mx))) return false;
    if (std::isnan(mx) || mx == 0) {
      m = mx;
      return true;
    }
    const int p = std::ilogb(mx);
    if (p > 64 || p < -64) {
      const double f = std::ldexp(1.0, -p);
      for (double& v : V2) v *= f;
      e += p;
    }
    V.swap(V2);
  }
  m = V[0];
  return true;
}

}  // namespace

template <typename TA, typename TB>
Scaled tt_dot(const std::vector<const TA*>& a, const std::vector<size_t>& ra, const std::vector<const TB*>& b,
              const std::vector<size_t>& rb, const std::vector<size_t>& modes) {
  double m = 0;
  long e = 0;
  if (dot_pass(a, ra, b, rb, modes, false, m, e)) return fold(m, e);
  std::vector<std::vector<TA>> sa;
  std::vector<std::vector<TB>> sb;
  bool nonfinite = false;
  e = 0;
  if (!scaled_cores(a, ra, modes, sa, e, nonfinite) || !scaled_cores(b, rb, modes, sb, e, nonfinite))
    return {nonfinite ? std::numeric_limits<double>::quiet_NaN() : 0.0, 0};
  long e2 = 0;
  dot_pass(ptrs_of(sa), ra, ptrs_of(sb), rb, modes, true, m, e2);
  return fold(m, e + e2);
}

namespace {

template <typename TC, typename TX>
double dot_dense_pass(const std::vector<const TC*>& cores, const std::vector<size_t>& ranks,
                      const std::vector<size_t>& modes, const TX* x) {
  size_t d = modes.size();
  size_t n = 1;
  for (size_t m : modes) n *= m;
  if (d == 1) return dot_mixed(cores[0], x, n);
  // <x, L R> = sum((x R^T) .* L): one pass over x with the small dense halves of the TT.
  std::vector<CoreRef<TC>> refs = full_refs(cores, modes, ranks);
  size_t s = best_split(refs), rows = 0, cols = 0;
  std::vector<TC> lbuf, rbuf;
  const TC* L = left_chain(refs, s, lbuf, rows);
  const TC* R = right_chain(refs, s, rbuf, cols);
  size_t rs = refs[s].r0;
  std::vector<double> Z(checked_mul(rows, rs, "x"));
  gemm<TX, TC, double>(rows, rs, cols, x, cols, 1, R, 1, cols, Z.data(), rs, false);
  double acc = 0;
  for (size_t i = 0; i < rows * rs; ++i) acc += Z[i] * double(L[i]);
  return acc;
}

}  // namespace

template <typename TC, typename TX>
Scaled tt_dot_dense(const std::vector<const TC*>& cores, const std::vector<size_t>& ranks,
                    const std::vector<size_t>& modes, const TX* x, ScaledCopy<TX>* cache) {
  const double v = dot_dense_pass(cores, ranks, modes, x);
  if (std::isfinite(v) && std::fabs(v) >= kTiny) return {v, 0};
  size_t n = 1;
  for (size_t m : modes) n *= m;
  ScaledCopy<TX> own;
  ScaledCopy<TX>& xs = cache ? *cache : own;
  if (!xs.ready) {
    xs.ready = true;
    const double m = max_abs_of(x, n);
    xs.nonfinite = std::isnan(m);
    xs.zero = m == 0;
    if (!xs.nonfinite && !xs.zero) {
      xs.e = std::ilogb(m);
      const double f1 = std::ldexp(1.0, -xs.e / 2), f2 = std::ldexp(1.0, -xs.e - (-xs.e / 2));
      xs.x.resize(n);
      for (size_t i = 0; i < n; ++i) xs.x[i] = static_cast<TX>(double(x[i]) * f1 * f2);
    }
  }
  std::vector<std::vector<TC>> sc;
  long e = 0;
  bool nonfinite = xs.nonfinite;
  if (nonfinite || xs.zero || !scaled_cores(cores, ranks, modes, sc, e, nonfinite))
    return {nonfinite ? std::numeric_limits<double>::quiet_NaN() : 0.0, 0};
  return fold(dot_dense_pass(ptrs_of(sc), ranks, modes, xs.x.data()), e + xs.e);
}

template <typename TA, typename TB>
Scaled dense_dot(const TA* a, const TB* b, size_t n) {
  size_t nb = (n + kChunk - 1) / kChunk;
  std::vector<double> part(nb);
  parallel_for(nb, [&](size_t i) {
    size_t s = i * kChunk;
    part[i] = dot_mixed(a + s, b + s, std::min(kChunk, n - s));
  });
  double t = 0;
  for (double v : part) t += v;
  if (std::isfinite(t) && std::fabs(t) >= kTiny) return {t, 0};
  // Again with both sides scaled by powers of two (on the fly) that bring their largest
  // magnitudes into [1, 2).
  const double ma = max_abs_of(a, n), mb = max_abs_of(b, n);
  if (std::isnan(ma) || std::isnan(mb)) return {std::numeric_limits<double>::quiet_NaN(), 0};
  if (ma == 0 || mb == 0) return {0.0, 0};
  const int ea = std::ilogb(ma), eb = std::ilogb(mb);
  const double a1 = std::ldexp(1.0, -ea / 2), a2 = std::ldexp(1.0, -ea - (-ea / 2));
  const double b1 = std::ldexp(1.0, -eb / 2), b2 = std::ldexp(1.0, -eb - (-eb / 2));
  parallel_for(nb, [&](size_t i) {
    size_t s = i * kChunk, end = std::min(n, s + kChunk);
    double acc = 0;
    for (size_t j = s; j < end; ++j) acc += (double(a[j]) * a1 * a2) * (double(b[j]) * b1 * b2);
    part[i] = acc;
  });
  t = 0;
  for (double v : part) t += v;
  return fold(t, long(ea) + eb);
}

#define SVC_T2(A, B)                                                                                                   \
  template Scaled tt_dot<A, B>(const std::vector<const A*>&, const std::vector<size_t>&, const std::vector<const B*>&, \
                               const std::vector<size_t>&, const std::vector<size_t>&);                                \
  template Scaled tt_dot_dense<A, B>(const std::vector<const A*>&, const std::vector<size_t>&,                         \
                                     const std::vector<size_t>&, const B*, ScaledCopy<B>*);                            \
  template Scaled dense_dot<A, B>(const A*, const B*, size_t);
SVC_T2(float, float)
SVC_T2(float, double)
SVC_T2(double, float)
SVC_T2(double, double)

}  // namespace svc
