#include "tt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <limits>
#include <mutex>
#include <new>
#include <numeric>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "kernels.h"
#include "linalg.h"
#include "threads.h"

namespace svc {

// Shorter sides above this use the randomized range finder instead of a full eigensolver.
constexpr size_t kEigFull = 384;
// Largest shorter side for which a randomized step whose block reached max_rank + 8 without
// meeting its budget is decided by the exact Gram route (above it, max_rank is taken to bind).
constexpr size_t kExactCap = 1024;
// Largest side for which rounding uses Jacobi SVD (accurate) rather than the Gram route (fast).
constexpr size_t kMaxJacobi = 384;
// Gram matrices of at least this side get their eigenvalues before any eigenvector.
constexpr size_t kValuesFirst = 192;
// Rows/columns sampled per unfolding for the min_ratio rank lower bounds.
constexpr size_t kSample = 256;

namespace {
// Blocks of at least kReuseMin bytes are 2 MiB aligned, and freed ones are kept (at most
// kReuseMax bytes in all, newest first) for the next allocation that fits in one without
// wasting more than a quarter of it. Such sizes are above glibc's largest mmap threshold, so
// without this every large result would be a fresh mapping that the kernel zeroes and faults
// in again: about a third of a 64 MB reconstruction's time.
constexpr size_t kHuge = size_t(2) << 20;
constexpr size_t kReuseMin = 2 * kHuge;
constexpr size_t kReuseMax = size_t(256) << 20;
struct Kept {
  void* p;
  size_t padded;
};
std::mutex g_kept_mu;
std::vector<Kept> g_kept;
size_t g_kept_bytes = 0;

size_t padded_size(size_t bytes) {
  size_t align = bytes >= kReuseMin ? kHuge : 64;
  return (bytes + align - 1) / align * align;
}
}  // namespace

Buffer alloc_buffer(size_t count, size_t elem) {
  if (count > (SIZE_MAX - kHuge) / elem)
    throw TTError("internal", "", "out of memory: the requested buffer size overflows");
  size_t bytes = std::max<size_t>(count * elem, 1);
  size_t padded = padded_size(bytes);
  void* p = nullptr;
  if (bytes >= kReuseMin) {
    std::lock_guard<std::mutex> lock(g_kept_mu);
    for (size_t i = g_kept.size(); i-- > 0;) {
      if (g_kept[i].padded >= padded && g_kept[i].padded - padded <= g_kept[i].padded / 4) {
        p = g_kept[i].p;
        padded = g_kept[i].padded;
        g_kept_bytes -= padded;
        g_kept.erase(g_kept.begin() + long(i));
        break;
      }
    }
  }
  if (!p) {
    // Large results: 2 MiB alignment and transparent huge pages, so first touch costs a few
    // faults instead of one per 4 KiB page.
    p = std::aligned_alloc(bytes >= kReuseMin ? kHuge : 64, padded);
#if defined(MADV_HUGEPAGE)
    if (p && bytes >= kReuseMin) madvise(p, padded, MADV_HUGEPAGE);
#endif
  }
  if (!p) throw TTError("internal", "", "out of memory: could not allocate " + std::to_string(bytes) + " bytes");
  Buffer b;
  b.p = p;
  b.bytes = bytes;
  return b;
}

void free_buffer(void* p, size_t bytes) {
  if (!p) return;
  if (bytes >= kReuseMin) {
    size_t padded = padded_size(bytes);
    std::vector<Kept> drop;
    {
      std::lock_guard<std::mutex> lock(g_kept_mu);
      if (padded <= kReuseMax) {
        g_kept.push_back({p, padded});
        g_kept_bytes += padded;
        p = nullptr;
        // oldest first out, until the cache is within its bound
        size_t n = 0;
        while (g_kept_bytes > kReuseMax) {
          g_kept_bytes -= g_kept[n].padded;
          drop.push_back(g_kept[n++]);
        }
        g_kept.erase(g_kept.begin(), g_kept.begin() + long(n));
      }
    }
    for (auto& k : drop) std::free(k.p);
  }
  std::free(p);
}

namespace {

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

constexpr size_t kChunk = 1 << 18;

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

size_t checked_mul(size_t a, size_t b, const char* field) {
  if (a != 0 && b > SIZE_MAX / a) throw TTError("bad_request", field, std::string(field) + " describes a tensor too large to address");
  return a * b;
}

uint64_t splitmix(uint64_t& s);

struct Factor {
  size_t r = 0;
  bool identity = false;    // the whole row space is kept: Q = I, remainder = C
  std::vector<double> Q;    // m x r, orthonormal columns (empty when identity)
  double discarded = 0;     // squared Frobenius norm of what was cut
  bool capped = false;      // rmax cut the rank below what the budget needed
  bool right_identity = false;  // last step, full column rank kept: core = C, remainder = I
  double kept_min = 0;      // smallest kept squared singular value of the remainder Q^T C
};

// The delta-rule cut of TT-SVD over the squared singular values e (descending): the smallest
// rank whose discarded energy (the sum of the trailing e) is at most delta2, then at most rmax.
// Sets r, capped and discarded.
Factor truncate(const std::vector<double>& e, double delta2, size_t rmax) {
  size_t g = e.size(), r = g;
  double tail = 0;
  while (r > 1 && tail + e[r - 1] <= delta2) {
    tail += e[r - 1];
    --r;
  }
  Factor f;
  f.capped = r > rmax;
  r = std::min(r, std::max<size_t>(rmax, 1));
  f.r = r;
  for (size_t i = r; i < g; ++i) f.discarded += e[i];
  return f;
}

// Squared singular values from singular values.
std::vector<double> squares(const std::vector<double>& S) {
  std::vector<double> e(S.size());
  for (size_t i = 0; i < S.size(); ++i) e[i] = S[i] * S[i];
  return e;
}

template <typename T>
Factor factor_random(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last);
template <typename T>
void basis_of(const T* A, size_t m, size_t n, const double* gram, std::vector<double>& Q);
template <typename T>
Factor factor_exact(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last);
template <typename T>
Factor factor_step(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last);
template <typename T>
Factor factor_step(const T* C, size_t m, size_t N, double delta2, size_t rmax) {
  return factor_step(C, m, N, delta2, rmax, false);
}

// Rank-revealing factorisation of the m x N matrix C for TT-SVD: a float64 Gram matrix of the
// shorter side, its eigen-decomposition, truncation to discarded energy <= delta2 and rank <= rmax.
template <typename T>
Factor factor_step(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last) {
  if (std::min(m, N) > kEigFull) return factor_random(C, m, N, delta2, rmax, last);
  return factor_exact(C, m, N, delta2, rmax, last);
}

template <typename T>
Factor factor_exact(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last) {
  size_t g = std::min(m, N);
  std::vector<double> G(g * g), w(g), V(g * g);
  if (m <= N)
    gemm<T, T, double>(m, m, N, C, N, 1, C, 1, N, G.data(), m, false);
  else
    gemm<T, T, double>(N, N, m, C, 1, N, C, N, 1, G.data(), N, false);
  for (size_t i = 0; i < g; ++i)
    for (size_t j = i + 1; j < g; ++j) {
      double s = 0.5 * (G[i * g + j] + G[j * g + i]);
      G[i * g + j] = G[j * g + i] = s;
    }
  // Large Gram matrices: eigenvalues first (about a sixth of the cost with vectors). When the
  // cut keeps the whole row or column space, no eigenvector is needed: the core is the identity,
  // or the orthonormal basis of C's own columns. High-rank data (noise, weights, ratios near 1)
  // end here.
  if (g >= kValuesFirst) {
    std::vector<double> G2(G);
    sym_eig(g, G2.data(), w.data(), nullptr);
    for (double& x : w) x = std::max(x, 0.0);
    Factor f = truncate(w, delta2, rmax);
    f.kept_min = w[f.r - 1];
    if (f.r == g) {
      if (m <= N) {
        f.identity = true;
        return f;
      }
      if (last) {
        f.right_identity = true;
        return f;
      }
      basis_of(C, m, N, G.data(), f.Q);
      return f;
    }
  }
  sym_eig(g, G.data(), w.data(), V.data());
  for (double& x : w) x = std::max(x, 0.0);  // the Gram matrix's eigenvalues, rounding below 0 cut
  Factor f = truncate(w, delta2, rmax);
  size_t r = f.r;
  f.kept_min = w[r - 1];
  if (m <= N) {
    if (r == m) {
      f.identity = true;
      return f;
    }
    f.Q.resize(m * r);
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < r; ++j) f.Q[i * r + j] = V[j * g + i];
  } else if (last && r == N) {
    // Nothing to cut and no later step to protect: C = C * I exactly, without an m x r float64
    // basis (which would be twice the input for float32 data).
    f.right_identity = true;
  } else {
    // U = C V_r spans the kept column space; re-orthonormalise it by QR.
    std::vector<double> U(m * r);
    gemm<T, double, double>(m, r, N, C, N, 1, V.data(), 1, g, U.data(), r, false);
    basis_of(U.data(), m, r, nullptr, f.Q);
  }
  return f;
}

// Orthonormal basis of the columns of Y (g x K) by two rounds of Gram + eigen-decomposition
// (all GEMM work, unlike Householder QR): Q = Y V diag(1/sqrt(lambda)). Directions below 1e-13
// of the largest are dropped; returns how many columns Q has.
size_t orthonormalize(size_t g, size_t K, const std::vector<double>& Y, std::vector<double>& Q) {
  std::vector<double> cur(Y.begin(), Y.begin() + g * K), G, w, V, sc;
  size_t k = K;
  for (int round = 0; round < 2; ++round) {
    G.assign(k * k, 0.0);
    w.assign(k, 0.0);
    V.assign(k * k, 0.0);
    gemm<double, double, double>(k, k, g, cur.data(), 1, k, cur.data(), k, 1, G.data(), k, false);
    for (size_t i = 0; i < k; ++i)
      for (size_t j = i + 1; j < k; ++j) G[i * k + j] = G[j * k + i] = 0.5 * (G[i * k + j] + G[j * k + i]);
    sym_eig(k, G.data(), w.data(), V.data());
    size_t keep = 0;
    while (keep < k && w[keep] > 1e-13 * std::max(w[0], 1e-300)) ++keep;
    if (keep == 0) keep = 1;
    // sc (k x keep) = V[:, :keep] / sqrt(w)
    sc.assign(k * keep, 0.0);
    for (size_t j = 0; j < keep; ++j) {
      double f = w[j] > 0 ? 1.0 / std::sqrt(w[j]) : 0.0;
      for (size_t i = 0; i < k; ++i) sc[i * keep + j] = V[j * k + i] * f;
    }
    Q.assign(g * keep, 0.0);
    gemm<double, double, double>(g, keep, k, cur.data(), k, 1, sc.data(), keep, 1, Q.data(), keep, false);
    k = keep;
    if (round == 0) cur = Q;
  }
  return k;
}

// Adaptive randomized subspace iteration for large unfoldings: an orthonormal basis of the
// dominant left (rows side) or right singular subspace of C, with Rayleigh-Ritz values. The
// discarded energy is |C|^2 minus the kept Ritz values, which is exactly the error of the
// projection used, so a rough subspace only costs rank. The block grows (64, 128, ... up to
// max_rank + 8) until the budget is met.
//
// Every product with C or C^T is orthonormalised before the next one. Orthonormalising only after
// C C^T (as an earlier version did) squares the singular values, and the Gram matrix used to
// orthonormalise squares them again: directions below (1e-13)^(1/4) ~ 6e-4 of the largest vanished,
// the block then looked "exhausted" and the step returned without meeting its budget, which put a
// floor of a few 1e-4 under the error of large unfoldings whatever the tolerance.
// Whenever the budget is not met here (precision or rank cap), the exact route decides instead.
// Orthonormal basis Q (m x n, m >= n) of the columns of A by Cholesky QR twice: Q1 = A R1^{-1}
// from the Gram matrix (given, or formed), then the same on Q1, all GEMM work on the pool.
// Stable while A is far from rank-deficient (each column's part outside the span of the earlier
// ones above 1e-6 of its norm); otherwise Householder QR, which is unblocked and serial.
template <typename T>
void basis_of(const T* A, size_t m, size_t n, const double* gram, std::vector<double>& Q) {
  std::vector<double> G(n * n), Rinv(n * n), Q1(m * n);
  if (gram) std::copy(gram, gram + n * n, G.begin());
  else gemm<T, T, double>(n, n, m, A, 1, n, A, n, 1, G.data(), n, false);
  if (m >= n && chol_inverse(n, G.data(), Rinv.data(), 1e-12)) {
    gemm<T, double, double>(m, n, n, A, n, 1, Rinv.data(), n, 1, Q1.data(), n, false);
    gemm<double, double, double>(n, n, m, Q1.data(), 1, n, Q1.data(), n, 1, G.data(), n, false);
    if (chol_inverse(n, G.data(), Rinv.data(), 1e-6)) {
      Q.assign(m * n, 0.0);
      gemm<double, double, double>(m, n, n, Q1.data(), n, 1, Rinv.data(), n, 1, Q.data(), n, false);
      return;
    }
  }
  std::vector<double> A64(A, A + m * n), R;
  qr(m, n, A64.data(), Q, R);
}

template <typename T>
Factor factor_random(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last) {
  const bool rows = m <= N;
  const size_t g = rows ? m : N, h = rows ? N : m;
  const size_t p = 8;
  const double trace = sumsq(C, m * N);
  // A = C (rows) or C^T (columns), g x h. mulA: X (h x K) -> A X; mulAt: Y (g x K) -> A^T Y.
  auto mulA = [&](const std::vector<double>& X, size_t K, std::vector<double>& Y) {
    Y.assign(g * K, 0.0);
    if (rows) gemm<T, double, double>(m, K, N, C, N, 1, X.data(), K, 1, Y.data(), K, false);
    else gemm<T, double, double>(N, K, m, C, 1, N, X.data(), K, 1, Y.data(), K, false);
  };
  auto mulAt = [&](const std::vector<double>& Y, size_t K, std::vector<double>& X) {
    X.assign(h * K, 0.0);
    if (rows) gemm<T, double, double>(N, K, m, C, 1, N, Y.data(), K, 1, X.data(), K, false);
    else gemm<T, double, double>(m, K, N, C, N, 1, Y.data(), K, 1, X.data(), K, false);
  };
  const size_t top = std::min(g, rmax + p);
  size_t K = std::min(g, std::min<size_t>(64, rmax + p));
  for (;;) {
    std::vector<double> Om(h * K), Y, Q, Z, Zq, W;
    uint64_t seed = 0x7a11ed + K;
    for (size_t i = 0; i < h * K; i += 2) {
      double u1 = (double(splitmix(seed) >> 11) + 0.5) * 0x1.0p-53, u2 = (double(splitmix(seed) >> 11) + 0.5) * 0x1.0p-53;
      double rad = std::sqrt(-2 * std::log(u1));
      Om[i] = rad * std::cos(6.283185307179586 * u2);
      if (i + 1 < h * K) Om[i + 1] = rad * std::sin(6.283185307179586 * u2);
    }
    mulA(Om, K, Y);
    size_t k = orthonormalize(g, K, Y, Q);
    for (int it = 0; it < 2; ++it) {
      mulAt(Q, k, Z);
      size_t kz = orthonormalize(h, k, Z, Zq);
      mulA(Zq, kz, Y);
      k = orthonormalize(g, kz, Y, Q);
    }
    // Rayleigh-Ritz: B = Q^T A A^T Q = W^T W with W = A^T Q (one product, no squaring before it).
    mulAt(Q, k, W);
    std::vector<double> B(k * k), th(k), S(k * k);
    gemm<double, double, double>(k, k, h, W.data(), 1, k, W.data(), k, 1, B.data(), k, false);
    for (size_t i = 0; i < k; ++i)
      for (size_t j = i + 1; j < k; ++j) B[i * k + j] = B[j * k + i] = 0.5 * (B[i * k + j] + B[j * k + i]);
    sym_eig(k, B.data(), th.data(), S.data());
    size_t r = 0;
    double kept = 0;
    bool met = false;
    for (size_t i = 0; i < k; ++i) {
      kept += std::max(th[i], 0.0);
      if (trace - kept <= delta2) { r = i + 1; met = true; break; }
    }
    if (met && r > rmax) return factor_exact(C, m, N, delta2, rmax, last);
    // k < K: the sketch resolved fewer directions than asked (the rest is below its precision).
    bool accept = met && (r + p <= k || k == g || k < K || K >= top);
    if (!accept) {
      if (!met && k < K) return factor_exact(C, m, N, delta2, rmax, last);
      if (!met && K >= top) {
        // The block reached max_rank + 8 without meeting the budget: max_rank binds, unless the
        // sketch underestimates the energy of the top ranks. The exact route decides where its
        // Gram matrix is affordable; above that the capped Ritz truncation stands.
        if (g <= kExactCap) return factor_exact(C, m, N, delta2, rmax, last);
      } else {
        // Next block: double it, or more when the energy still missing would need more
        // directions (at the current smallest Ritz value each), and straight to the cap when the
        // doubled block would be within 3/4 of it (a second large round costs more than one
        // slightly larger).
        size_t want = 2 * K;
        if (!met && k > 0 && th[k - 1] > 0) {
          double more = (trace - kept - delta2) / th[k - 1];
          if (more > 0 && double(k) + more > double(want)) want = size_t(std::min(double(g), double(k) + more)) + p;
        }
        K = 4 * want >= 3 * top ? top : std::min(want, top);
        // A block of half the side or more costs more than the exact Gram route.
        if (2 * K >= g) return factor_exact(C, m, N, delta2, rmax, last);
        continue;
      }
    }
    Factor f;
    if (!met) {
      r = std::min(k, rmax);
      f.capped = true;
    }
    f.r = r;
    kept = 0;
    for (size_t i = 0; i < r; ++i) kept += std::max(th[i], 0.0);
    f.discarded = std::max(0.0, trace - kept);
    f.kept_min = std::max(th[r - 1], 0.0);  // B = Z^T C has B B^T = diag(th[:r]) exactly
    // Ritz vectors Z = Q S[:, :r] (g x r).
    std::vector<double> Zr(g * r);
    gemm<double, double, double>(g, r, k, Q.data(), k, 1, S.data(), 1, k, Zr.data(), r, false);
    if (rows) {
      f.Q.swap(Zr);
    } else {
      std::vector<double> U(m * r);
      gemm<T, double, double>(m, r, N, C, N, 1, Zr.data(), r, 1, U.data(), r, false);
      basis_of(U.data(), m, r, nullptr, f.Q);
    }
    return f;
  }
}

// Remainder Q^T C (r x N) in the working type.
template <typename T>
Buffer project(const Factor& f, const T* C, size_t m, size_t N) {
  std::vector<T> Qt(f.r * m);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < f.r; ++j) Qt[j * m + i] = static_cast<T>(f.Q[i * f.r + j]);
  Buffer out = alloc_buffer(checked_mul(f.r, N, "data"), sizeof(T));
  gemm<T, T, T>(f.r, N, m, Qt.data(), m, 1, C, N, 1, out.as<T>(), N, false);
  return out;
}

template <typename T>
struct CoreRef {
  const T* p;
  size_t r0, n, r1;
};

// Split point s of a chain: left part = cores [0, s), right part = cores [s, d), chosen so the
// two dense halves (P_s x r_s and r_s x Q_s) are as small as possible.
template <typename T>
size_t best_split(const std::vector<CoreRef<T>>& cs) {
  size_t d = cs.size();
  std::vector<double> P(d + 1, 1.0), Qs(d + 1, 1.0);
  for (size_t k = 0; k < d; ++k) P[k + 1] = P[k] * double(cs[k].n);
  for (size_t k = d; k-- > 0;) Qs[k] = Qs[k + 1] * double(cs[k].n);
  size_t best = 1;
  double bestc = std::numeric_limits<double>::infinity();
  for (size_t s = 1; s < d; ++s) {
    double c = P[s] * double(cs[s].r0) + double(cs[s].r0) * Qs[s];
    if (c < bestc) { bestc = c; best = s; }
  }
  return best;
}

// Dense left half: cores [0, s) as a (n_0...n_{s-1}) x r_s matrix; returns it and its rows.
template <typename T>
const T* left_chain(const std::vector<CoreRef<T>>& cs, size_t s, std::vector<T>& buf, size_t& rows) {
  std::vector<T> tmp;
  const T* L = cs[0].p;
  rows = cs[0].n;
  for (size_t k = 1; k < s; ++k) {
    const auto& c = cs[k];
    tmp.resize(checked_mul(rows, c.n * c.r1, "cores"));
    gemm<T, T, T>(rows, c.n * c.r1, c.r0, L, c.r0, 1, c.p, c.n * c.r1, 1, tmp.data(), c.n * c.r1, false);
    buf.swap(tmp);
    L = buf.data();
    rows *= c.n;
  }
  return L;
}

// Dense right half: cores [s, d) as an r_s x (n_s...n_{d-1}) matrix; returns it and its columns.
template <typename T>
const T* right_chain(const std::vector<CoreRef<T>>& cs, size_t s, std::vector<T>& buf, size_t& cols) {
  size_t d = cs.size();
  std::vector<T> tmp;
  const T* R = cs[d - 1].p;
  cols = cs[d - 1].n;
  for (size_t k = d - 1; k-- > s;) {
    const auto& c = cs[k];
    tmp.resize(checked_mul(c.r0 * c.n, cols, "cores"));
    gemm<T, T, T>(c.r0 * c.n, cols, c.r1, c.p, c.r1, 1, R, cols, 1, tmp.data(), cols, false);
    buf.swap(tmp);
    R = buf.data();
    cols *= c.n;
  }
  return R;
}

// Dense contraction of a chain of (contiguous) cores into out, C order over their mode indices:
// out = L_s R_s, one GEMM with inner dimension r_s over the two dense halves.
template <typename T>
void contract_chain(const std::vector<CoreRef<T>>& cs, T* out) {
  size_t d = cs.size();
  if (d == 1) {
    std::memcpy(out, cs[0].p, cs[0].n * sizeof(T));
    return;
  }
  size_t s = best_split(cs), rows = 0, cols = 0;
  std::vector<T> lbuf, rbuf;
  const T* L = left_chain(cs, s, lbuf, rows);
  const T* R = right_chain(cs, s, rbuf, cols);
  size_t rs = cs[s].r0;
  gemm<T, T, T>(rows, cols, rs, L, rs, 1, R, cols, 1, out, cols, false);
}

template <typename T>
std::vector<CoreRef<T>> full_refs(const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                                  const std::vector<size_t>& ranks) {
  std::vector<CoreRef<T>> v;
  for (size_t k = 0; k < modes.size(); ++k) v.push_back({cores[k], ranks[k], modes[k], ranks[k + 1]});
  return v;
}

// Relative error of a TT against the dense data it came from, by a chunked reconstruction.
template <typename T>
double measure_error(const T* data, size_t n, const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                     const std::vector<size_t>& ranks, double norm2, int scale_e = 0) {
  const double f1 = std::ldexp(1.0, scale_e / 2), f2 = std::ldexp(1.0, scale_e - scale_e / 2);
  size_t n0 = modes[0], per = n / n0;
  size_t step = std::max<size_t>(1, std::min(n0, (size_t(1) << 22) / std::max<size_t>(per, 1)));
  if (n0 >= 8 && step > n0 / 8) step = std::max<size_t>(1, n0 / 8);
  std::vector<CoreRef<T>> refs = full_refs(cores, modes, ranks);
  std::vector<T> buf(step * per), first;
  double err2 = 0;
  for (size_t a = 0; a < n0; a += step) {
    size_t len = std::min(step, n0 - a);
    size_t r1 = ranks[1];
    refs[0] = {cores[0] + a * r1, 1, len, r1};
    contract_chain(refs, buf.data());
    const T* src = data + a * per;
    size_t cnt = len * per;
    size_t nb = (cnt + kChunk - 1) / kChunk;
    std::vector<double> part(nb);
    parallel_for(nb, [&](size_t i) {
      size_t s = i * kChunk;
      size_t len2 = std::min(kChunk, cnt - s);
      if (scale_e == 0) {
        part[i] = sqdiffk(src + s, buf.data() + s, len2);
      } else {
        // data far from 1 in magnitude: differences are scaled before squaring (norm2 is of the
        // scaled data), so that neither overflows nor underflows in float64
        double acc = 0;
        for (size_t j = 0; j < len2; ++j) {
          double dlt = (double(src[s + j]) - double(buf[s + j])) * f1 * f2;
          acc += dlt * dlt;
        }
        part[i] = acc;
      }
    });
    for (double v : part) err2 += v;
  }
  return std::sqrt(err2 / norm2);
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<size_t> stratified(size_t total, size_t want, uint64_t seed) {
  std::vector<size_t> idx;
  if (total <= want) {
    idx.resize(total);
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
  }
  uint64_t s = seed;
  for (size_t i = 0; i < want; ++i) {
    size_t lo = i * total / want, hi = (i + 1) * total / want;
    idx.push_back(lo + splitmix(s) % (hi - lo));
  }
  return idx;
}

// min_ratio: proving early that dense/TT size >= min_ratio cannot be reached by the TT that the
// decomposition would return (max_rank included), without changing that TT.
//
// Facts used (A_k: the k-th unfolding of the data, M_k x N_k; delta2: the per-step budget;
// E: the energy discarded by the steps done so far; rho_k(tau): the smallest r with
// sum_{i>r} sigma_i(A_k)^2 <= tau):
//  1. An uncapped step k keeps r_k >= rho_k(E_{k-1} + delta2): the data so far equal an
//     orthonormal frame times the remainder plus an orthogonal error of energy E_{k-1}, so the
//     step's rank-r_k truncation is a rank-r_k approximation of A_k within E_{k-1} + delta2.
//     A step that needs more than max_rank is capped: r_k = max_rank (possible only where
//     min(M_k, N_k) > max_rank), and what it discards is then unbounded.
//  2. The delta-rank of a submatrix never exceeds that of the matrix (its singular values are
//     no larger), so a sampled block of A_k gives rho_k from below at any threshold.
//  3. After step s, if the smallest kept squared singular value of the remainder B_s exceeds
//     everything the later steps may discard, the later cores still have full row rank r_s, so
//     r_k >= ceil(r_s / (n_{s+1} ... n_k)) for k > s (as long as no later step is capped).
// The size bound is the minimum over the scenarios "the first capped step from now on is j"
// (or none): ranks from 1 (and 3) before j, max_rank at j, 1 after.
struct RankProbe {
  std::vector<size_t> modes, M;       // M[k] = n_1 ... n_k
  size_t n = 0, cap = 0;
  double delta2 = 0, margin = 0;
  std::vector<std::vector<double>> w;  // per unfolding: sampled squared singular values, descending
  std::vector<size_t> boost;            // per unfolding: a rank to assume instead of the sampled bound (0: none)

  size_t smax(size_t k) const { return std::min(M[k], n / M[k]); }
  // Lower bound on rho_k(tau); 1 where nothing was sampled.
  size_t rho(size_t k, double tau) const {
    if (k < boost.size() && boost[k]) return std::min(boost[k], smax(k));
    const std::vector<double>& v = w[k];
    if (v.empty()) return 1;
    size_t r = v.size();
    double tail = 0;
    while (r > 1 && tail + std::max(v[r - 1], 0.0) <= tau + margin) {
      tail += std::max(v[r - 1], 0.0);
      --r;
    }
    return r;
  }
  // Lower bound on the final TT size given the ranks of steps 1..s (known[0..s]), the energy E
  // discarded so far, and (chain) whether fact 3 applies to r_s.
  double size_bound(const std::vector<size_t>& known, size_t s, double E, bool chain) const {
    size_t d = modes.size();
    std::vector<double> L(d + 1, 1.0);
    for (size_t k = 0; k <= s; ++k) L[k] = double(known[k]);
    L[d] = 1;
    // Bounds for an uncapped future step k, and whether it can be uncapped at all.
    std::vector<bool> must_cap(d + 1, false);
    double div = 1;
    for (size_t k = s + 1; k < d; ++k) {
      size_t r = rho(k, E + double(k - s) * delta2);
      if (r > cap) must_cap[k] = true;
      double lb = double(std::min(r, smax(k)));
      if (chain && s > 0) {
        div *= double(modes[k - 1]);
        lb = std::max(lb, std::ceil(double(known[s]) / div));
      }
      L[k] = std::min(lb, double(cap));
    }
    auto core = [&](const std::vector<double>& r, size_t k) { return r[k] * double(modes[k]) * r[k + 1]; };
    // Scenario "no cap from now on": every future step uncapped.
    double best = std::numeric_limits<double>::infinity();
    bool ok = true;
    for (size_t k = s + 1; k < d; ++k) ok = ok && !must_cap[k];
    if (ok) {
      double t = 0;
      for (size_t k = 0; k < d; ++k) t += core(L, k);
      best = t;
    }
    // Scenario "first cap at j": L before j (without the chain, which needs no later cap), cap at
    // j, 1 after.
    std::vector<double> R(d + 1, 1.0);
    for (size_t k = 0; k <= s; ++k) R[k] = double(known[k]);
    for (size_t j = s + 1; j < d; ++j) {
      if (smax(j) > cap) {
        std::vector<double> T = R;
        T[j] = double(cap);
        double t = 0;
        for (size_t k = 0; k < d; ++k) t += core(T, k);
        best = std::min(best, t);
      }
      if (must_cap[j]) break;  // step j cannot be passed uncapped
      R[j] = std::min(double(std::min(rho(j, E + double(j - s) * delta2), smax(j))), double(cap));
    }
    return best;
  }
  // Lower bound on the size of any TT within the tolerance, ranks not capped: each unfolding of
  // such a TT approximates the data's within the whole budget (d-1)·δ², so its rank is at least
  // the sampled δ-rank at that budget (or the rank assumed by `boost`).
  double tol_size_bound() const {
    size_t d = modes.size();
    std::vector<double> L(d + 1, 1.0);
    for (size_t k = 1; k < d; ++k)
      L[k] = double(std::min(rho(k, double(d - 1) * delta2), smax(k)));
    double t = 0;
    for (size_t k = 0; k < d; ++k) t += L[k] * double(modes[k]) * L[k + 1];
    return t;
  }
  // Whether the bounds prove min_ratio unreachable before any step: by the TT-SVD result
  // (max_rank counted) or by every TT within the tolerance.
  bool unreachable(double min_ratio) const {
    std::vector<size_t> ones(modes.size() + 1, 1);
    return double(n) / size_bound(ones, 0, 0.0, false) < min_ratio || double(n) / tol_size_bound() < min_ratio;
  }
};

// Samples every unfolding with blocks of 64 rows and columns (middle ones first: they carry the
// largest ranks), then grows the blocks of saturated samples (delta-rank at least half the
// size) to the smallest of 128, 256, 512 at which larger ranks there could decide (by either
// bound), so that compressible data pay microseconds. Returns true as soon as the bounds prove
// min_ratio unreachable.
template <typename T>
bool probe_gives_up(const T* data, RankProbe& P, double min_ratio) {
  size_t d = P.modes.size(), n = P.n;
  std::vector<size_t> order;
  for (size_t k = 1; k < d; ++k) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return P.smax(a) > P.smax(b); });
  const size_t smax_sample = 2 * kSample;
  // Samples unfolding k with blocks of S rows and columns; returns whether a larger block there
  // could show a larger rank.
  auto sample = [&](size_t k, size_t S) -> bool {
    size_t Mk = P.M[k], Nn = n / Mk;
    std::vector<size_t> rows = stratified(Mk, S, 0x5eed0000 + 2 * k);
    std::vector<size_t> cols = stratified(Nn, S, 0x5eed0001 + 2 * k);
    size_t sr = rows.size(), sc = cols.size();
    std::vector<double> sub(sr * sc);
    for (size_t a = 0; a < sr; ++a) {
      const T* row = data + rows[a] * Nn;
      for (size_t b = 0; b < sc; ++b) sub[a * sc + b] = double(row[cols[b]]);
    }
    size_t g = std::min(sr, sc);
    std::vector<double> G(g * g), w(g);
    if (sr <= sc)
      gemm<double, double, double>(sr, sr, sc, sub.data(), sc, 1, sub.data(), 1, sc, G.data(), g, false);
    else
      gemm<double, double, double>(sc, sc, sr, sub.data(), 1, sc, sub.data(), sc, 1, G.data(), g, false);
    for (size_t i = 0; i < g; ++i)
      for (size_t j = i + 1; j < g; ++j) G[i * g + j] = G[j * g + i] = 0.5 * (G[i * g + j] + G[j * g + i]);
    sym_eig(g, G.data(), w.data(), nullptr);
    P.w[k] = w;
    size_t r = P.rho(k, double(k) * P.delta2);
    // no larger rank can show: the whole unfolding, the largest block, a block as large as the
    // unfolding's rank can be, or a sample whose rank is well below its size
    return !((sr == Mk && sc == Nn) || S >= smax_sample || g >= P.smax(k) || 2 * r < g);
  };
  std::vector<char> saturated(d, 0);  // not vector<bool>: written from several threads below
  std::vector<size_t> side(d, 64);
  for (size_t k : order) {
    saturated[k] = sample(k, 64) ? 1 : 0;
    if (P.unreachable(min_ratio)) return true;
  }
  // Larger samples of the saturated unfoldings only help if ranks as large as such a sample can
  // show would decide: take the smallest size that would, sample them at it, middle first, and
  // look again.
  for (;;) {
    size_t S = 0;
    for (size_t cand = 128; cand <= smax_sample && S == 0; cand *= 2) {
      P.boost.assign(d, 0);
      bool any = false;
      for (size_t k : order)
        if (saturated[k] && side[k] < cand) P.boost[k] = cand, any = true;
      if (any && P.unreachable(min_ratio)) S = cand;
      P.boost.clear();
    }
    if (S == 0) return false;
    std::vector<size_t> grow;
    for (size_t k : order)
      if (saturated[k] && side[k] < S) grow.push_back(k);
    // As many samples at once as the pool has threads (each eigensolve is sequential), middle
    // first; the bound is checked after each group.
    const size_t group = std::max<size_t>(1, size_t(pool_threads()));
    for (size_t g0 = 0; g0 < grow.size(); g0 += group) {
      size_t g1 = std::min(grow.size(), g0 + group);
      parallel_for(g1 - g0, [&](size_t i) {
        size_t k = grow[g0 + i];
        side[k] = S;
        saturated[k] = sample(k, S) ? 1 : 0;
      });
      if (P.unreachable(min_ratio)) return true;
    }
  }
  return false;
}


// One-sided Jacobi SVD of A (rows x cols, rows >= cols) after rotating its columns by the
// eigenvectors of A^T A: the columns are then orthogonal up to the Gram matrix's rounding, so
// Jacobi needs two or three sweeps instead of ten, with absolute accuracy eps·|A| kept.
void jacobi_preconditioned(size_t rows, size_t cols, const double* A, std::vector<double>& U, std::vector<double>& S,
                           std::vector<double>& V) {
  std::vector<double> G(cols * cols), w(cols), E(cols * cols), P(cols * cols), A1(rows * cols), V1;
  gemm<double, double, double>(cols, cols, rows, A, 1, cols, A, cols, 1, G.data(), cols, false);
  for (size_t i = 0; i < cols; ++i)
    for (size_t j = i + 1; j < cols; ++j) G[i * cols + j] = G[j * cols + i] = 0.5 * (G[i * cols + j] + G[j * cols + i]);
  sym_eig(cols, G.data(), w.data(), E.data());
  for (size_t i = 0; i < cols; ++i)
    for (size_t j = 0; j < cols; ++j) P[i * cols + j] = E[j * cols + i];
  gemm<double, double, double>(rows, cols, cols, A, cols, 1, P.data(), cols, 1, A1.data(), cols, false);
  jacobi_svd(rows, cols, A1.data(), U, S, V1);
  V.assign(cols * cols, 0.0);
  gemm<double, double, double>(cols, cols, cols, P.data(), cols, 1, V1.data(), cols, 1, V.data(), cols, false);
}

// Truncated SVD of a small m x N float64 matrix by QR + one-sided Jacobi (resolves singular
// values far below the float64 Gram's sqrt(eps) floor, which rounding at tight tolerances needs).
// Returns Q (m x r, orthonormal) in f.Q and the remainder Q^T C = S_r V_r^T (r x N) in rem.
// R of the QR factorisation of the tall rows x cols matrix given by row(i, dst) (cols >= 1):
// Householder on blocks of rows (each in cache, in parallel), then on the stacked R factors.
// Only R is formed; its rows and columns are those of A's Gram matrix up to rounding.
void householder_r(size_t m, size_t n, double* a) {
  // in place: a (m x n, row-major) becomes R in its first min(m, n) rows (below the diagonal
  // left unspecified)
  std::vector<double> v(m), w(n);
  size_t k = std::min(m, n);
  for (size_t j = 0; j < k; ++j) {
    double norm2 = 0;
    for (size_t i = j; i < m; ++i) norm2 += a[i * n + j] * a[i * n + j];
    double norm = std::sqrt(norm2);
    if (norm == 0.0) continue;
    double x0 = a[j * n + j];
    double alpha = x0 > 0 ? -norm : norm;
    for (size_t i = j; i < m; ++i) v[i] = a[i * n + j];
    v[j] -= alpha;
    double vv = 0;
    for (size_t i = j; i < m; ++i) vv += v[i] * v[i];
    if (vv == 0.0) continue;
    std::fill(w.begin() + long(j), w.end(), 0.0);
    for (size_t i = j; i < m; ++i) {
      double vi = v[i];
      const double* row = &a[i * n];
      for (size_t c = j; c < n; ++c) w[c] += vi * row[c];
    }
    double f = 2.0 / vv;
    for (size_t i = j; i < m; ++i) {
      double vi = f * v[i];
      double* row = &a[i * n];
      for (size_t c = j; c < n; ++c) row[c] -= vi * w[c];
    }
  }
}

template <typename RowFn>
std::vector<double> tall_r(size_t rows, size_t cols, RowFn row) {
  const size_t block = std::max<size_t>(4 * cols, 1024);
  size_t nb = (rows + block - 1) / block;
  std::vector<double> stacked(nb * cols * cols, 0.0);
  parallel_for(nb, [&](size_t b) {
    size_t s = b * block, len = std::min(block, rows - s);
    std::vector<double> a(len * cols);
    for (size_t i = 0; i < len; ++i) row(s + i, &a[i * cols]);
    householder_r(len, cols, a.data());
    size_t k = std::min(len, cols);
    for (size_t i = 0; i < k; ++i)
      for (size_t c = i; c < cols; ++c) stacked[(b * cols + i) * cols + c] = a[i * cols + c];
  });
  householder_r(nb * cols, cols, stacked.data());
  std::vector<double> R(cols * cols, 0.0);
  for (size_t i = 0; i < std::min(nb * cols, cols); ++i)
    for (size_t c = i; c < cols; ++c) R[i * cols + c] = stacked[i * cols + c];
  return R;
}

Factor factor_precise(const double* C, size_t m, size_t N, double delta2, size_t rmax, std::vector<double>& rem) {
  bool tall = m >= N;
  size_t rows = tall ? m : N, cols = tall ? N : m;
  if (!tall && N > 2 * m) {
    // Wide: only the left singular vectors are needed (they make the core), and C's rows give
    // them through R of C^T = Q R (R^T R = C C^T without forming it): R = Ur S V^T, C = V S (Q Ur)^T.
    // The remainder is then V_r^T C.
    std::vector<double> R = tall_r(N, m, [&](size_t i, double* dst) {
      for (size_t j = 0; j < m; ++j) dst[j] = C[j * N + i];
    });
    std::vector<double> Ur, S, V;
    jacobi_preconditioned(m, m, R.data(), Ur, S, V);
    Factor f = truncate(squares(S), delta2, rmax);
    size_t r = f.r;
    f.Q.resize(m * r);
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < r; ++j) f.Q[i * r + j] = V[i * m + j];
    rem.assign(r * N, 0.0);
    gemm<double, double, double>(r, N, m, f.Q.data(), 1, r, C, N, 1, rem.data(), N, false);
    return f;
  }
  std::vector<double> B(rows * cols);
  if (tall) std::copy(C, C + m * N, B.begin());
  else
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < N; ++j) B[j * m + i] = C[i * N + j];
  std::vector<double> Ub, S, V;
  if (rows > 2 * cols) {
    std::vector<double> Q, R, Ur;
    qr(rows, cols, B.data(), Q, R);
    jacobi_preconditioned(cols, cols, R.data(), Ur, S, V);
    Ub.assign(rows * cols, 0.0);
    gemm<double, double, double>(rows, cols, cols, Q.data(), cols, 1, Ur.data(), cols, 1, Ub.data(), cols, false);
  } else {
    jacobi_preconditioned(rows, cols, B.data(), Ub, S, V);
  }
  const size_t g = cols;
  Factor f = truncate(squares(S), delta2, rmax);
  size_t r = f.r;
  // B = Ub S V^T. tall: C = B -> left = Ub, right = V. wide: C = B^T = V S Ub^T -> left = V, right = Ub.
  const std::vector<double>& L = tall ? Ub : V;
  const std::vector<double>& Rt = tall ? V : Ub;
  f.Q.resize(m * r);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < r; ++j) f.Q[i * r + j] = L[i * g + j];
  rem.assign(r * N, 0.0);
  for (size_t j = 0; j < r; ++j)
    for (size_t c = 0; c < N; ++c) rem[j * N + c] = S[j] * Rt[c * g + j];
  return f;
}



// Routes of a TT-SVD pass, from fastest to most accurate: kFast uses the randomized range finder
// on large unfoldings, kExact the float64 Gram matrix of every unfolding (singular values down to
// about 1e-8 of the largest), kPrecise QR + one-sided Jacobi in float64 on every unfolding with
// float64 remainders (relative accuracy, for tolerances below what the Gram matrix resolves).
enum Route { kFast = 0, kExact = 1, kPrecise = 2 };

// One TT-SVD pass (kFast or kExact) in the working type. Returns false when min_ratio proved
// unreachable (probe given); capped says whether max_rank bound at some step.
template <typename T>
bool svd_pass(const T* data, size_t n, const std::vector<size_t>& modes, double delta2, size_t max_rank, Route route,
              RankProbe* probe, double min_ratio, TTResult& res, bool& capped) {
  size_t d = modes.size();
  res = TTResult();
  res.ranks.assign(1, 1);
  capped = false;
  const T* cur = data;
  Buffer curbuf;
  size_t rprev = 1, rest = n;
  double discarded = 0;
  for (size_t k = 0; k + 1 < d; ++k) {
    size_t m = rprev * modes[k], N = rest / modes[k];
    bool last = k + 2 == d;
    Factor f = route == kFast ? factor_step(cur, m, N, delta2, max_rank, last) : factor_exact(cur, m, N, delta2, max_rank, last);
    capped = capped || f.capped;
    discarded += f.discarded;
    if (probe) {
      // The ranks so far are final; bound the rest before building this step's core.
      std::vector<size_t> known(res.ranks);
      known.push_back(f.r);
      size_t s = k + 1;
      bool chain = f.kept_min > double(d - 1 - s) * delta2 + probe->margin;
      if (double(n) / probe->size_bound(known, s, discarded, chain) < min_ratio) return false;
    }
    Buffer core = alloc_buffer(m * f.r, sizeof(T));
    T* cp = core.as<T>();
    if (f.right_identity) {
      std::memcpy(cp, cur, m * N * sizeof(T));
      Buffer eye = alloc_buffer(N * N, sizeof(T));
      T* ep = eye.as<T>();
      std::fill(ep, ep + N * N, T(0));
      for (size_t i = 0; i < N; ++i) ep[i * N + i] = T(1);
      curbuf = std::move(eye);
      cur = curbuf.as<T>();
    } else if (f.identity) {
      std::fill(cp, cp + m * f.r, T(0));
      for (size_t i = 0; i < m; ++i) cp[i * f.r + i] = T(1);
    } else {
      for (size_t i = 0; i < m * f.r; ++i) cp[i] = static_cast<T>(f.Q[i]);
      Buffer next = project(f, cur, m, N);
      curbuf = std::move(next);
      cur = curbuf.as<T>();
    }
    res.cores.push_back(std::move(core));
    res.ranks.push_back(f.r);
    rprev = f.r;
    rest = N;
  }
  // The last remainder is the last core.
  Buffer last;
  if (cur == data) {
    last = alloc_buffer(rprev * rest, sizeof(T));
    std::memcpy(last.p, data, rprev * rest * sizeof(T));
  } else {
    last = std::move(curbuf);
  }
  res.cores.push_back(std::move(last));
  res.ranks.push_back(1);
  return true;
}

// kPrecise pass: QR + one-sided Jacobi per unfolding, remainders kept in float64.
template <typename T>
void precise_pass(const T* data, size_t n, const std::vector<size_t>& modes, double delta2, size_t max_rank,
                  TTResult& res, bool& capped) {
  size_t d = modes.size();
  res = TTResult();
  res.ranks.assign(1, 1);
  capped = false;
  std::vector<double> cur(data, data + n), rem;
  size_t rprev = 1, rest = n;
  for (size_t k = 0; k + 1 < d; ++k) {
    size_t m = rprev * modes[k], N = rest / modes[k];
    Factor f = factor_precise(cur.data(), m, N, delta2, max_rank, rem);
    capped = capped || f.capped;
    Buffer core = alloc_buffer(m * f.r, sizeof(T));
    T* cp = core.as<T>();
    for (size_t i = 0; i < m * f.r; ++i) cp[i] = static_cast<T>(f.Q[i]);
    res.cores.push_back(std::move(core));
    res.ranks.push_back(f.r);
    cur.swap(rem);
    rprev = f.r;
    rest = N;
  }
  Buffer last = alloc_buffer(rprev * rest, sizeof(T));
  for (size_t i = 0; i < rprev * rest; ++i) last.as<T>()[i] = static_cast<T>(cur[i]);
  res.cores.push_back(std::move(last));
  res.ranks.push_back(1);
}

// A TT equal to the data: identity cores around one core that holds the data itself (left
// identities while the prefix is the smaller side, right identities after). The last resort of
// the repair: its reconstruction is the data exactly (x * 1 plus exact zeros).
template <typename T>
void exact_tt(const T* data, size_t n, const std::vector<size_t>& modes, TTResult& res) {
  size_t d = modes.size();
  std::vector<double> M(d + 1, 1), Nr(d + 1, 1);
  for (size_t k = 0; k < d; ++k) M[k + 1] = M[k] * double(modes[k]);
  for (size_t k = d; k-- > 0;) Nr[k] = Nr[k + 1] * double(modes[k]);
  size_t best = 0;
  double bestc = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < d; ++s) {
    double c = double(n);
    for (size_t k = 0; k < s; ++k) c += M[k + 1] * M[k + 1];
    for (size_t k = s + 1; k < d; ++k) c += Nr[k] * Nr[k];
    if (c < bestc) { bestc = c; best = s; }
  }
  res = TTResult();
  res.ranks.assign(d + 1, 1);
  for (size_t k = 1; k <= best; ++k) res.ranks[k] = size_t(M[k]);
  for (size_t k = best + 1; k < d; ++k) res.ranks[k] = size_t(Nr[k]);
  for (size_t k = 0; k < d; ++k) {
    size_t r0 = res.ranks[k], nk = modes[k], r1 = res.ranks[k + 1], len = r0 * nk * r1;
    Buffer b = alloc_buffer(len, sizeof(T));
    T* c = b.as<T>();
    if (k == best) {
      std::memcpy(c, data, n * sizeof(T));
    } else {
      std::fill(c, c + len, T(0));
      // left: [a][i][a*nk + i] = 1; right: [i*r1 + b][i][b] = 1
      if (k < best)
        for (size_t a = 0; a < r0; ++a)
          for (size_t i = 0; i < nk; ++i) c[(a * nk + i) * r1 + a * nk + i] = T(1);
      else
        for (size_t i = 0; i < nk; ++i)
          for (size_t b2 = 0; b2 < r1; ++b2) c[((i * r1 + b2) * nk + i) * r1 + b2] = T(1);
    }
    res.cores.push_back(std::move(b));
  }
}

template <typename T>
double max_abs(const T* x, size_t n) {
  size_t nb = (n + kChunk - 1) / kChunk;
  std::vector<double> part(nb);
  parallel_for(nb, [&](size_t i) {
    size_t s = i * kChunk, e = std::min(n, s + kChunk);
    T m = 0;
    bool bad = false;
    for (size_t j = s; j < e; ++j) {
      T a = std::fabs(x[j]);
      m = a > m ? a : m;
      bad |= !(a == a);
    }
    part[i] = bad ? std::numeric_limits<double>::quiet_NaN() : double(m);
  });
  double t = 0;
  for (double v : part) t = (std::isnan(v) || std::isnan(t)) ? std::numeric_limits<double>::quiet_NaN() : std::max(t, v);
  return t;
}

// x * 2^e, exact in the working type unless the result leaves its range (two factors so that
// 2^e itself need not be representable).
template <typename T>
void scale_pow2(T* x, size_t n, int e) {
  int e1 = e / 2, e2 = e - e1;
  double f1 = std::ldexp(1.0, e1), f2 = std::ldexp(1.0, e2);
  parallel_for((n + kChunk - 1) / kChunk, [&](size_t i) {
    size_t s = i * kChunk, end = std::min(n, s + kChunk);
    for (size_t j = s; j < end; ++j) x[j] = static_cast<T>(double(x[j]) * f1 * f2);
  });
}

// Multiplies the TT by 2^e, shared out over the cores so that each stays within range.
template <typename T>
void unscale_cores(TTResult& res, const std::vector<size_t>& modes, int e) {
  size_t d = res.cores.size();
  std::vector<int> lg(d);
  long sum = 0;
  for (size_t k = 0; k < d; ++k) {
    size_t len = res.ranks[k] * modes[k] * res.ranks[k + 1];
    double m = max_abs(res.cores[k].as<T>(), len);
    lg[k] = m > 0 ? std::ilogb(m) : 0;
    sum += lg[k];
  }
  double target = double(sum + e) / double(d);
  int used = 0;
  for (size_t k = 0; k < d; ++k) {
    int ek = k + 1 < d ? int(std::lround(target - lg[k])) : e - used;
    used += ek;
    size_t len = res.ranks[k] * modes[k] * res.ranks[k + 1];
    if (ek) scale_pow2(res.cores[k].as<T>(), len, ek);
  }
}

}  // namespace

template <typename T>
TTResult tt_compress(const T* data, size_t n, const std::vector<size_t>& modes, double tol, size_t max_rank,
                     double min_ratio) {
  size_t d = modes.size();
  size_t prod = 1;
  for (size_t m : modes) prod = checked_mul(prod, m, "modes");
  if (d == 0 || prod != n) throw TTError("bad_request", "modes", "modes must multiply to the length of data");
  if (!(tol > 0 && tol < 1)) throw TTError("bad_request", "tolerance", "tolerance must be between 0 and 1");
  if (max_rank < 1) throw TTError("bad_request", "max_rank", "max_rank must be at least 1");
  const bool f32 = std::is_same_v<T, float>;
  double amax = max_abs(data, n);
  if (!std::isfinite(amax)) throw TTError("bad_request", "data", "data must contain only finite numbers");
  if (amax == 0) throw TTError("bad_request", "data", "data must not be all zeros");

  TTResult res;
  res.ranks.assign(1, 1);
  if (d == 1) {
    // The one core is the data: ratio 1.
    if (min_ratio > 1) {
      res.gave_up = true;
      return res;
    }
    Buffer c = alloc_buffer(n, sizeof(T));
    std::memcpy(c.p, data, n * sizeof(T));
    res.cores.push_back(std::move(c));
    res.ranks.push_back(1);
    res.relative_error = 0;
    return res;
  }
  // Data far from 1 in magnitude (float32 near 1e38 or subnormal, float64 near 1e-200) are
  // decomposed as data * 2^-e, which is exact, so that remainders neither overflow nor lose
  // precision to underflow; 2^e is shared out over the cores afterwards.
  int e = std::ilogb(amax);
  const int lim = f32 ? 64 : 400;
  const bool scaled = e > lim || e < -lim;
  const T* work = data;
  Buffer sbuf;
  if (scaled) {
    sbuf = alloc_buffer(n, sizeof(T));
    std::memcpy(sbuf.p, data, n * sizeof(T));
    scale_pow2(sbuf.as<T>(), n, -e);
    work = sbuf.as<T>();
  } else {
    e = 0;
  }
  double norm2 = sumsq(work, n);
  if (!std::isfinite(norm2)) throw TTError("bad_request", "data", "data must contain only finite numbers");

  // The truncation budget leaves room for the rounding of the cores and of the reconstruction
  // in the working type; it matters only near the type's precision.
  const double unit = f32 ? 0x1.0p-24 : 0x1.0p-53;
  const double reserve = 4 * unit * std::sqrt(double(d));
  double tol_t = std::sqrt(std::max(tol * tol - reserve * reserve, 0.25 * tol * tol));
  const double per_step = norm2 / double(d - 1);
  RankProbe probe;
  RankProbe* pp = nullptr;
  if (min_ratio > 0) {
    probe.modes = modes;
    probe.n = n;
    probe.cap = std::max<size_t>(max_rank, 1);
    probe.delta2 = tol_t * tol_t * per_step;
    probe.margin = 1e-12 * norm2;
    probe.M.assign(d + 1, 1);
    for (size_t k = 1; k <= d; ++k) probe.M[k] = probe.M[k - 1] * modes[k - 1];
    probe.w.assign(d + 1, {});
    if (probe_gives_up(work, probe, min_ratio)) {
      res.gave_up = true;
      return res;
    }
    pp = &probe;
  }
  // Start on the fastest route the tolerance allows; whenever the measured error exceeds the
  // tolerance without max_rank binding, redo the decomposition on the next, more accurate route
  // (twice on the last, with the budget shrunk by the overshoot), and as a last resort return
  // the data as an exact TT. Only a binding max_rank returns an error above the tolerance.
  Route route = f32 ? (tol < 1e-5 ? kExact : kFast) : (tol < 1e-7 ? kPrecise : kFast);
  int precise_tries = 0;
  for (;;) {
    bool capped = false;
    double delta2 = tol_t * tol_t * per_step;
    if (route == kPrecise) {
      precise_pass(work, n, modes, delta2, max_rank, res, capped);
      ++precise_tries;
    } else if (!svd_pass(work, n, modes, delta2, max_rank, route, pp, min_ratio, res, capped)) {
      TTResult gave;
      gave.gave_up = true;
      return gave;
    }
    pp = nullptr;  // the rank bounds hold for the first pass's truncations only
    if (scaled) unscale_cores<T>(res, modes, e);
    std::vector<const T*> cps;
    for (auto& c : res.cores) cps.push_back(c.as<T>());
    res.relative_error = measure_error(data, n, cps, modes, res.ranks, norm2, -e);
    if (res.relative_error <= tol || capped) break;
    if (route == kPrecise && precise_tries >= 2) {
      exact_tt(data, n, modes, res);
      std::vector<const T*> ex;
      for (auto& c : res.cores) ex.push_back(c.as<T>());
      res.relative_error = measure_error(data, n, ex, modes, res.ranks, norm2, -e);
      break;
    }
    if (route == kPrecise) tol_t *= std::min(0.9, 0.9 * tol / res.relative_error);
    else route = Route(route + 1);
  }
  if (min_ratio > 0) {
    size_t size = 0;
    for (size_t k = 0; k < d; ++k) size += res.ranks[k] * modes[k] * res.ranks[k + 1];
    if (double(n) / double(size) < min_ratio) {
      TTResult gave;
      gave.gave_up = true;
      return gave;
    }
  }
  return res;
}

template <typename T>
Buffer tt_reconstruct(const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                      const std::vector<size_t>& ranks, const std::vector<size_t>& shape,
                      const std::vector<size_t>& groups, const std::vector<std::pair<size_t, size_t>>& ranges) {
  std::vector<CoreRef<T>> refs;
  std::vector<std::vector<T>> owned;
  size_t total = 1, mi = 0;
  for (size_t j = 0; j < shape.size(); ++j) {
    size_t s = 0, e = shape[j];
    if (!ranges.empty()) { s = ranges[j].first; e = ranges[j].second; }
    if (s >= e || e > shape[j]) throw TTError("bad_request", "slice", "slice ranges must satisfy 0 <= start < stop <= size");
    total = checked_mul(total, e - s, "slice");
    size_t g = groups[j];
    if (s == 0 && e == shape[j]) {
      for (size_t t = 0; t < g; ++t, ++mi) refs.push_back({cores[mi], ranks[mi], modes[mi], ranks[mi + 1]});
      continue;
    }
    size_t rin = ranks[mi], rout = ranks[mi + g], len = e - s;
    owned.emplace_back(checked_mul(checked_mul(rin, len, "slice"), rout, "slice"));
    T* dst = owned.back().data();
    if (g == 1) {
      const T* c = cores[mi];
      size_t n = modes[mi];
      for (size_t a = 0; a < rin; ++a) std::memcpy(dst + a * len * rout, c + (a * n + s) * rout, len * rout * sizeof(T));
    } else {
      // Merge the group's factor cores for each index in [s, e): prefix products along the
      // mixed-radix digits, recomputed only from the first digit that changed.
      std::vector<size_t> n(g), rk(g + 1), dig(g, SIZE_MAX);
      for (size_t t = 0; t < g; ++t) n[t] = modes[mi + t];
      for (size_t t = 0; t <= g; ++t) rk[t] = ranks[mi + t];
      std::vector<std::vector<double>> pre(g);
      std::vector<size_t> cd(g);
      for (size_t i = s; i < e; ++i) {
        size_t x = i;
        for (size_t t = g; t-- > 0;) { cd[t] = x % n[t]; x /= n[t]; }
        size_t from = 0;
        while (from < g && cd[from] == dig[from]) ++from;
        for (size_t t = from; t < g; ++t) {
          dig[t] = cd[t];
          const T* c = cores[mi + t];
          std::vector<double>& P = pre[t];
          P.assign(rin * rk[t + 1], 0.0);
          if (t == 0) {
            for (size_t a = 0; a < rin; ++a)
              for (size_t b = 0; b < rk[1]; ++b) P[a * rk[1] + b] = double(c[(a * n[0] + cd[0]) * rk[1] + b]);
          } else {
            const std::vector<double>& Pp = pre[t - 1];
            for (size_t a = 0; a < rin; ++a)
              for (size_t q = 0; q < rk[t]; ++q) {
                double v = Pp[a * rk[t] + q];
                if (v == 0) continue;
                const T* row = c + (q * n[t] + cd[t]) * rk[t + 1];
                double* out = &P[a * rk[t + 1]];
                for (size_t b = 0; b < rk[t + 1]; ++b) out[b] += v * double(row[b]);
              }
          }
        }
        const std::vector<double>& F = pre[g - 1];
        for (size_t a = 0; a < rin; ++a)
          for (size_t b = 0; b < rout; ++b) dst[(a * len + (i - s)) * rout + b] = static_cast<T>(F[a * rout + b]);
      }
    }
    refs.push_back({dst, rin, len, rout});
    mi += g;
  }
  Buffer out = alloc_buffer(total, sizeof(T));
  contract_chain(refs, out.as<T>());
  return out;
}

template <typename TA, typename TB>
double tt_dot(const std::vector<const TA*>& a, const std::vector<size_t>& ra, const std::vector<const TB*>& b,
              const std::vector<size_t>& rb, const std::vector<size_t>& modes) {
  std::vector<double> V{1.0}, W, V2;
  for (size_t k = 0; k < modes.size(); ++k) {
    size_t n = modes[k], a0 = ra[k], a1 = ra[k + 1], b0 = rb[k], b1 = rb[k + 1];
    W.resize(a0 * n * b1);
    gemm<double, TB, double>(a0, n * b1, b0, V.data(), b0, 1, b[k], n * b1, 1, W.data(), n * b1, false);
    V2.resize(a1 * b1);
    gemm<TA, double, double>(a1, b1, a0 * n, a[k], 1, a1, W.data(), b1, 1, V2.data(), b1, false);
    V.swap(V2);
  }
  return V[0];
}

template <typename TC, typename TX>
double tt_dot_dense(const std::vector<const TC*>& cores, const std::vector<size_t>& ranks,
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


template <typename T>
TTResult tt_round(const std::vector<const T*>& cores, const std::vector<size_t>& ranks_in,
                  const std::vector<size_t>& modes, double tol, size_t max_rank) {
  size_t d = modes.size();
  std::vector<size_t> r = ranks_in;
  std::vector<std::vector<double>> c(d);
  for (size_t k = 0; k < d; ++k) {
    size_t len = r[k] * modes[k] * r[k + 1];
    c[k].assign(cores[k], cores[k] + len);
  }
  double orig2 = tt_dot(cores, ranks_in, cores, ranks_in, modes);
  if (!std::isfinite(orig2)) throw TTError("bad_request", "cores", "cores must hold finite numbers whose norm fits in float64");
  if (orig2 <= 0) throw TTError("bad_request", "cores", "the tensor must not be zero");
  // Right-to-left orthogonalisation: core k becomes right-orthonormal, R moves into core k-1.
  for (size_t k = d - 1; k >= 1; --k) {
    size_t n = modes[k], m = r[k], cols = n * r[k + 1];
    std::vector<double> Ct(cols * m);
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < cols; ++j) Ct[j * m + i] = c[k][i * cols + j];
    std::vector<double> Q, R;
    qr(cols, m, Ct.data(), Q, R);  // Ct = Q R, C = R^T Q^T
    size_t kk = std::min(cols, m);
    std::vector<double> nc(kk * cols);
    for (size_t i = 0; i < cols; ++i)
      for (size_t j = 0; j < kk; ++j) nc[j * cols + i] = Q[i * kk + j];
    size_t rows = r[k - 1] * modes[k - 1];
    std::vector<double> prev(rows * kk);
    gemm<double, double, double>(rows, kk, m, c[k - 1].data(), m, 1, R.data(), 1, m, prev.data(), kk, false);
    c[k].swap(nc);
    c[k - 1].swap(prev);
    r[k] = kk;
  }
  double nrm2 = 0;
  for (double v : c[0]) nrm2 += v * v;
  // float32 cores round at 6e-8 per element: their share of the tolerance is kept out of the
  // truncation budget (it matters only near float32's precision)
  const double reserve = std::is_same_v<T, float> ? 4 * 0x1.0p-24 * std::sqrt(double(d)) : 0.0;
  const double tol_t = std::sqrt(std::max(tol * tol - reserve * reserve, 0.25 * tol * tol));
  double delta2 = d > 1 ? tol_t * tol_t * nrm2 / double(d - 1) : 0;
  double discarded = 0;
  bool capped = false;
  for (size_t k = 0; k + 1 < d; ++k) {
    size_t m = r[k] * modes[k], N = r[k + 1];
    std::vector<double> Rm;
    Factor f;
    if (std::min(m, N) <= kMaxJacobi) {
      f = factor_precise(c[k].data(), m, N, delta2, max_rank, Rm);
    } else {
      // Large ranks: the Gram route (O(n^3) once instead of Jacobi sweeps), precise to ~1e-8.
      f = factor_step(c[k].data(), m, N, delta2, max_rank);
      if (f.identity) {
        f.Q.assign(m * m, 0.0);
        for (size_t i = 0; i < m; ++i) f.Q[i * m + i] = 1.0;
      }
      Rm.assign(f.r * N, 0.0);
      gemm<double, double, double>(f.r, N, m, f.Q.data(), 1, f.r, c[k].data(), N, 1, Rm.data(), N, false);
    }
    discarded += f.discarded;
    capped = capped || f.capped;
    size_t cols = modes[k + 1] * r[k + 2];
    std::vector<double> next(f.r * cols);
    gemm<double, double, double>(f.r, cols, N, Rm.data(), N, 1, c[k + 1].data(), cols, 1, next.data(), cols, false);
    c[k].swap(f.Q);
    c[k + 1].swap(next);
    r[k + 1] = f.r;
  }
  TTResult res;
  res.ranks = r;
  for (size_t k = 0; k < d; ++k) {
    Buffer b = alloc_buffer(c[k].size(), sizeof(T));
    T* p = b.as<T>();
    for (size_t i = 0; i < c[k].size(); ++i) p[i] = static_cast<T>(c[k][i]);
    res.cores.push_back(std::move(b));
  }
  std::vector<const T*> out;
  for (auto& b : res.cores) out.push_back(b.as<T>());
  if constexpr (std::is_same_v<T, double>) {
    // The truncations act on orthonormal frames, so the squared error is exactly the discarded
    // energy; summing it avoids the cancellation of |t|^2 + |s|^2 - 2<t,s> at small errors.
    res.relative_error = std::sqrt(discarded / nrm2);
  } else {
    // float32 cores add their own rounding, so compare the stored result with the input.
    double new2 = tt_dot(out, r, out, r, modes);
    double cross = tt_dot(cores, ranks_in, out, r, modes);
    res.relative_error = std::sqrt(std::max(0.0, orig2 + new2 - 2 * cross) / orig2);
  }
  if (res.relative_error > tol && !capped) {
    // Never a violation without a binding max_rank: the input itself is within any tolerance.
    TTResult same;
    same.ranks = ranks_in;
    for (size_t k = 0; k < d; ++k) {
      size_t len = ranks_in[k] * modes[k] * ranks_in[k + 1];
      Buffer b = alloc_buffer(len, sizeof(T));
      std::memcpy(b.p, cores[k], len * sizeof(T));
      same.cores.push_back(std::move(b));
    }
    same.relative_error = 0;
    return same;
  }
  return res;
}

template <typename TA, typename TB>
double dense_dot(const TA* a, const TB* b, size_t n) {
  size_t nb = (n + kChunk - 1) / kChunk;
  std::vector<double> part(nb);
  parallel_for(nb, [&](size_t i) {
    size_t s = i * kChunk;
    part[i] = dot_mixed(a + s, b + s, std::min(kChunk, n - s));
  });
  double t = 0;
  for (double v : part) t += v;
  return t;
}

#define SVC_T(T)                                                                                                  \
  template TTResult tt_compress<T>(const T*, size_t, const std::vector<size_t>&, double, size_t, double);       \
  template Buffer tt_reconstruct<T>(const std::vector<const T*>&, const std::vector<size_t>&,                    \
                                    const std::vector<size_t>&, const std::vector<size_t>&,                      \
                                    const std::vector<size_t>&, const std::vector<std::pair<size_t, size_t>>&);   \
  template TTResult tt_round<T>(const std::vector<const T*>&, const std::vector<size_t>&,                        \
                                const std::vector<size_t>&, double, size_t);
SVC_T(float)
SVC_T(double)
#define SVC_T2(A, B)                                                                                              \
  template double tt_dot<A, B>(const std::vector<const A*>&, const std::vector<size_t>&,                          \
                               const std::vector<const B*>&, const std::vector<size_t>&,                          \
                               const std::vector<size_t>&);                                                       \
  template double tt_dot_dense<A, B>(const std::vector<const A*>&, const std::vector<size_t>&,                    \
                                     const std::vector<size_t>&, const B*);                                       \
  template double dense_dot<A, B>(const A*, const B*, size_t);
SVC_T2(float, float)
SVC_T2(float, double)
SVC_T2(double, float)
SVC_T2(double, double)

}  // namespace svc
