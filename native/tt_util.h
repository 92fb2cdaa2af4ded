// Helpers shared by the TT files: kernel dot products, sums of squares, checked sizes, a seeded generator.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels.h"
#include "threads.h"
#include "tt.h"

namespace svc {
namespace tt_detail {

// G (g x g) = (G + G^T) / 2: a Gram matrix summed by gemm or in parts, made symmetric to the
// last bit before an eigensolver that assumes it.
inline void symmetrize(double* G, size_t g) {
  for (size_t i = 0; i < g; ++i)
    for (size_t j = i + 1; j < g; ++j) G[i * g + j] = G[j * g + i] = 0.5 * (G[i * g + j] + G[j * g + i]);
}

inline double dotk(const float* a, const float* b, size_t n) { return K().dot_ff(a, b, n); }
inline double dotk(const double* a, const double* b, size_t n) { return K().dot_dd(a, b, n); }
inline double sqdiffk(const float* a, const float* b, size_t n) { return K().sqdiff_ff(a, b, n); }
inline double sqdiffk(const double* a, const double* b, size_t n) { return K().sqdiff_dd(a, b, n); }
template <typename TA, typename TB>
double dot_mixed(const TA* a, const TB* b, size_t n) {
  if constexpr (std::is_same_v<TA, TB>) {
    return dotk(a, b, n);
  } else {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
    return s;
  }
}

inline void scank(const float* x, size_t n, double* amax, double* ss) { K().scan_f(x, n, amax, ss); }
inline void scank(const double* x, size_t n, double* amax, double* ss) { K().scan_d(x, n, amax, ss); }
inline void gramk(size_t m, size_t kc, const float* C, size_t ldc, double* X, double* G, double* amax) {
  K().gram_f(m, kc, C, ldc, X, G, amax);
}
inline void gramk(size_t m, size_t kc, const double* C, size_t ldc, double* X, double* G, double* amax) {
  K().gram_d(m, kc, C, ldc, X, G, amax);
}

inline double lr_sqdiffk(size_t m, size_t w, size_t r, const float* L, size_t ldl, const float* R, size_t ldr,
                         const float* D, size_t ldd) {
  return K().lr_sqdiff_f(m, w, r, L, ldl, R, ldr, D, ldd);
}
inline double lr_sqdiffk(size_t m, size_t w, size_t r, const double* L, size_t ldl, const double* R, size_t ldr,
                         const double* D, size_t ldd) {
  return K().lr_sqdiff_d(m, w, r, L, ldl, R, ldr, D, ldd);
}

constexpr size_t kChunk = 1 << 18;

// Magnitudes below this are taken for an underflow of a product (rescaled and done again).
constexpr double kTiny = 0x1.0p-900;

// Largest magnitude of n values; NaN when one is NaN or infinite.
template <typename T>
double max_abs_of(const T* x, size_t n) {
  double m = 0;
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    const double v = std::fabs(double(x[i]));
    bad |= !(v <= std::numeric_limits<double>::max());
    m = v > m ? v : m;
  }
  return bad ? std::numeric_limits<double>::quiet_NaN() : m;
}

// Copies of the cores, each multiplied by the power of two that brings its largest magnitude
// into [1, 2) (exact); the powers' sum goes to e. False where a core is zero (the product is 0);
// NaN in e's place is signalled by nonfinite.
template <typename T>
bool scaled_cores(const std::vector<const T*>& c, const std::vector<size_t>& r, const std::vector<size_t>& modes,
                  std::vector<std::vector<T>>& out, long& e, bool& nonfinite) {
  out.resize(c.size());
  for (size_t k = 0; k < c.size(); ++k) {
    const size_t len = r[k] * modes[k] * r[k + 1];
    const double m = max_abs_of(c[k], len);
    if (std::isnan(m)) {
      nonfinite = true;
      return false;
    }
    if (m == 0) return false;
    const int p = std::ilogb(m);
    const double f1 = std::ldexp(1.0, -p / 2), f2 = std::ldexp(1.0, -p - (-p / 2));
    out[k].resize(len);
    for (size_t i = 0; i < len; ++i) out[k][i] = static_cast<T>(double(c[k][i]) * f1 * f2);
    e += p;
  }
  return true;
}

template <typename T>
std::vector<const T*> ptrs_of(const std::vector<std::vector<T>>& v) {
  std::vector<const T*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

template <typename T>
double sumsq(const T* x, size_t n) {
  size_t nb = (n + kChunk - 1) / kChunk;
  std::vector<double> part(nb);
  parallel_for(nb, [&](size_t i) {
    size_t s = i * kChunk, len = std::min(kChunk, n - s);
    part[i] = dotk(x + s, x + s, len);
  });
  double t = 0;
  for (double v : part) t += v;
  return t;
}

inline size_t checked_mul(size_t a, size_t b, const char* field) {
  if (a != 0 && b > SIZE_MAX / a)
    throw TTError("bad_request", field, std::string(field) + " describes a tensor too large to address");
  return a * b;
}

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace tt_detail
}  // namespace svc
