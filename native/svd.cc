// The SVD and eigen routes of TT-SVD: Gram eigensolver, randomized subspace iteration, Cholesky/Householder QR, Jacobi.
#include "svd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gemm.h"
#include "linalg.h"
#include "threads.h"
#include "tt_util.h"

namespace svc {
namespace tt_detail {

// Shorter sides above this use the randomized range finder instead of a full eigensolver.
constexpr size_t kEigFull = 384;
// Largest shorter side for which a randomized step whose block reached max_rank + 8 without
// meeting its budget is decided by the exact Gram route (above it, max_rank is taken to bind).
constexpr size_t kExactCap = 1024;
// Gram matrices of at least this side get their eigenvalues before any eigenvector.
constexpr size_t kValuesFirst = 192;
// Largest side of a row Gram matrix formed by the gram kernels (above it, by the GEMM).
constexpr size_t kGramRowsMax = 512;

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

// The cut of the symmetric g x g Gram matrix G from its eigenvalues alone (clamped at 0, where
// rounding takes them below), with kept_min; t keeps the tridiagonal form for the eigenvectors
// wanted later.
Factor cut_by_values(const std::vector<double>& G, size_t g, double delta2, size_t rmax, SymTridiag& t) {
  sym_tridiag(g, G.data(), t);
  std::vector<double> w = t.w;
  for (double& x : w) x = std::max(x, 0.0);
  Factor f = truncate(w, delta2, rmax);
  f.kept_min = w[f.r - 1];
  return f;
}

template <typename T>
Factor factor_random(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last);
template <typename T>
void basis_of(const T* A, size_t m, size_t n, const double* gram, std::vector<double>& Q);
bool partial_vectors(const std::vector<double>& G, const SymTridiag& t, Factor& f, double delta2,
                     std::vector<double>& Vr);

// Rank-revealing factorisation of the m x N matrix C for TT-SVD: a float64 Gram matrix of the
// shorter side, its eigen-decomposition, truncation to discarded energy <= delta2 and rank <= rmax.
template <typename T>
Factor factor_step(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last) {
  if (std::min(m, N) > kEigFull) return factor_random(C, m, N, delta2, rmax, last);
  return factor_exact(C, m, N, delta2, rmax, last);
}

// G (m x m, row-major) = C C^T in float64 for the m x N matrix C (row-major, m <= N), and with
// amax the largest magnitude in C (m <= kGramRowsMax only): blocks of
// columns split over the pool, each block's rows converted to float64 once and multiplied in
// register blocks of the upper triangle (the gram kernels), the partial sums added and mirrored.
template <typename T>
void gram_rows(const T* C, size_t m, size_t N, double* G, double* amax) {
  if (m > kGramRowsMax) {
    gemm<T, T, double>(m, m, N, C, N, 1, C, 1, N, G, m, false);
    symmetrize(G, m);
    return;
  }
  // Blocks of 16K entries (at least 256 columns): the converted rows stay in L2.
  const size_t kc = std::clamp<size_t>(16384 / std::max<size_t>(m, 1), 256, 2048) / 16 * 16;
  const size_t blocks = (N + kc - 1) / kc;
  const double work = double(m) * double(m) * double(N);
  const size_t parts = work < 4e6 ? 1 : std::min(blocks, 4 * size_t(pool_threads()));
  std::vector<double> acc(parts * m * m, 0.0), mx(parts, 0.0);
  const size_t kp = (kc + 63) / 64 * 64 + 8;
  parallel_for(parts, [&](size_t t) {
    const size_t b0 = blocks * t / parts, b1 = blocks * (t + 1) / parts;
    // The converted rows, reused by the thread from call to call; the rows past m must be zero.
    // 64-byte aligned, so that no load of a row splits a cache line.
    thread_local std::vector<double> Xs;
    if (Xs.size() < (m + 12) * kp + 8) Xs.resize((m + 12) * kp + 8);
    double* X = Xs.data() + (8 - (reinterpret_cast<uintptr_t>(Xs.data()) / sizeof(double)) % 8) % 8;
    std::fill(X + m * kp, X + (m + 12) * kp, 0.0);
    double* Gt = acc.data() + t * m * m;
    for (size_t b = b0; b < b1; ++b) {
      const size_t c0 = b * kc;
      gramk(m, std::min(kc, N - c0), C + c0, N, X, Gt, amax ? &mx[t] : nullptr);
    }
  });
  if (amax) *amax = *std::max_element(mx.begin(), mx.end());
  for (size_t i = 0; i < m; ++i)
    for (size_t j = i; j < m; ++j) {
      double v = 0;
      for (size_t t = 0; t < parts; ++t) v += acc[t * m * m + i * m + j];
      G[i * m + j] = G[j * m + i] = v;
    }
}

Factor factor_gram(std::vector<double>& G, size_t g, double delta2, size_t rmax) {
  symmetrize(G.data(), g);
  // Large Gram matrices: eigenvalues first (about a sixth of the cost with vectors). When the
  // cut keeps the whole row space, no eigenvector is needed: the core is the identity.
  if (g >= kValuesFirst) {
    SymTridiag t;
    Factor f = cut_by_values(G, g, delta2, rmax, t);
    if (f.r == g) {
      f.identity = true;
      return f;
    }
    std::vector<double> B;
    if (partial_vectors(G, t, f, delta2, B)) {
      f.Q.swap(B);
      return f;
    }
  }
  std::vector<double> w(g), V(g * g);
  sym_eig(g, G.data(), w.data(), V.data());
  for (double& x : w) x = std::max(x, 0.0);  // the Gram matrix's eigenvalues, rounding below 0 cut
  Factor f = truncate(w, delta2, rmax);
  const size_t r = f.r;
  f.kept_min = w[r - 1];
  if (r == g) {
    f.identity = true;
    return f;
  }
  f.Q.resize(g * r);
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < r; ++j) f.Q[i * r + j] = V[j * g + i];
  return f;
}

template <typename T>
Factor factor_exact(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last) {
  if (m <= N) {
    std::vector<double> G(m * m);
    gram_rows(C, m, N, G.data());
    return factor_gram(G, m, delta2, rmax);
  }
  // Tall: the Gram matrix of the columns, C^T C.
  const size_t g = N;
  std::vector<double> G(g * g);
  gemm<T, T, double>(N, N, m, C, 1, N, C, N, 1, G.data(), N, false);
  symmetrize(G.data(), g);
  // Large Gram matrices: eigenvalues first. When the cut keeps the whole column space, no
  // eigenvector is needed: the orthonormal basis of C's own columns (or, on the last step, the
  // data itself as the core). High-rank data (noise, weights, ratios near 1) end here.
  if (g >= kValuesFirst) {
    SymTridiag t;
    Factor f = cut_by_values(G, g, delta2, rmax, t);
    if (f.r == g) {
      if (last) {
        f.right_identity = true;
        return f;
      }
      basis_of(C, m, N, G.data(), f.Q);
      return f;
    }
    std::vector<double> Vr;
    if (partial_vectors(G, t, f, delta2, Vr)) {
      // U = C V_r spans the kept column space; orthonormalised by QR.
      std::vector<double> U(m * f.r);
      gemm<T, double, double>(m, f.r, N, C, N, 1, Vr.data(), f.r, 1, U.data(), f.r, false);
      basis_of(U.data(), m, f.r, nullptr, f.Q);
      return f;
    }
  }
  std::vector<double> w(g), V(g * g);
  sym_eig(g, G.data(), w.data(), V.data());
  for (double& x : w) x = std::max(x, 0.0);  // the Gram matrix's eigenvalues, rounding below 0 cut
  Factor f = truncate(w, delta2, rmax);
  size_t r = f.r;
  f.kept_min = w[r - 1];
  if (last && r == N) {
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

// The eigenvectors of the smaller side of the cut f made on the Gram matrix G (tridiagonal form
// t), by inverse iteration: the kept ones, or the discarded ones, whose orthogonal complement is
// the kept space (weights, photographs and noise keep most of the spectrum). What the subspace
// found discards is measured on G; returns false, for the full QL decomposition to decide, should
// it exceed the budget. Otherwise Vr (g x r) is an orthonormal basis of the kept space and
// f.discarded includes what it discards.
bool partial_vectors(const std::vector<double>& G, const SymTridiag& t, Factor& f, double delta2,
                     std::vector<double>& Vr) {
  const size_t g = t.n, r = f.r;
  const bool kept_side = 2 * r <= g;
  const size_t lo = kept_side ? 0 : r, hi = kept_side ? r : g, k = hi - lo;
  std::vector<double> Z, Zt(g * k), B, GB(g * k);
  sym_tridiag_vectors(t, lo, hi, Z);
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < k; ++j) Zt[i * k + j] = Z[j * g + i];
  // Orthonormal to rounding whatever inverse iteration left (Cholesky QR twice, Householder
  // where that breaks down), so that what is measured below is the energy of a projection.
  basis_of(Zt.data(), g, k, nullptr, B);
  gemm<double, double, double>(g, k, g, G.data(), g, 1, B.data(), k, 1, GB.data(), k, false);
  double span = 0, trace = 0;
  for (size_t i = 0; i < g; ++i) {
    trace += G[i * g + i];
    for (size_t j = 0; j < k; ++j) span += B[i * k + j] * GB[i * k + j];
  }
  const double disc = kept_side ? trace - span : span;
  const double allowed = (f.capped ? f.discarded : std::max(delta2, f.discarded)) + 1e-12 * trace;
  if (disc > allowed) return false;
  f.discarded = std::max(f.discarded, disc);
  if (kept_side) Vr.swap(B);
  else complement_basis(g, k, B.data(), Vr);
  return true;
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
    symmetrize(G.data(), k);
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
  // Relative costs, fitted to timings on a 2-core AVX-512 machine: a round of block K (six
  // products with C, GEMM speed, and the K x K eigen-decompositions of its orthonormalisations)
  // and the exact route (the float64 Gram matrix, then a level-2 tridiagonalisation).
  const double gd = double(g), hd = double(h);
  auto round_cost = [&](size_t Kb) { return gd * hd * double(Kb) + 24.0 * double(Kb) * double(Kb) * double(Kb); };
  const double exact_cost = 0.12 * gd * gd * hd + 0.7 * gd * gd * gd;
  for (;;) {
    std::vector<double> Om(h * K), Y, Q, Z, Zq, W;
    uint64_t seed = 0x7a11ed + K;
    for (size_t i = 0; i < h * K; i += 2) {
      double u1 = (double(splitmix(seed) >> 11) + 0.5) * 0x1.0p-53,
             u2 = (double(splitmix(seed) >> 11) + 0.5) * 0x1.0p-53;
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
      if (trace - kept <= delta2) {
        r = i + 1;
        met = true;
        break;
      }
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
        // The rank the budget needs, extrapolated from the Ritz values as a power law
        // th_i ~ i^-a (slow decay: trained weights, photographs, noise): the missing energy
        // over the budget gives how far the tail must go. The rank `want` aims at is only a
        // lower bound (every missing direction holds at most the smallest Ritz value so far).
        double need = double(K);
        if (!met && k >= 16 && th[k / 2] > 0 && th[k / 4] > th[k / 2]) {
          const double a = std::log(th[k / 4] / th[k / 2]) / std::log(double(k / 2 + 1) / double(k / 4 + 1));
          const double miss = (trace - kept) / std::max(delta2, 1e-300 * trace);
          need =
              a <= 1.05 ? double(g) : std::min(double(g), double(k) * std::pow(std::max(miss, 1.0), 1.0 / (a - 1.0)));
          need = std::max(need, double(K));
        }
        // A block of half the side or more costs more than the exact Gram route, and so does a
        // round, at the rank extrapolated, whose estimated cost passes half of it.
        if (2 * K >= g || round_cost(size_t(need)) > 0.5 * exact_cost) return factor_exact(C, m, N, delta2, rmax, last);
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

// One-sided Jacobi SVD of A (rows x cols, rows >= cols) after rotating its columns by the
// eigenvectors of A^T A: the columns are then orthogonal up to the Gram matrix's rounding, so
// Jacobi needs two or three sweeps instead of ten, with absolute accuracy eps·|A| kept.
void jacobi_preconditioned(size_t rows, size_t cols, const double* A, std::vector<double>& U, std::vector<double>& S,
                           std::vector<double>& V) {
  std::vector<double> G(cols * cols), w(cols), E(cols * cols), P(cols * cols), A1(rows * cols), V1;
  gemm<double, double, double>(cols, cols, rows, A, 1, cols, A, cols, 1, G.data(), cols, false);
  symmetrize(G.data(), cols);
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

#define SVC_T(T)                                                                   \
  template void gram_rows<T>(const T*, size_t, size_t, double*, double*);          \
  template Factor factor_step<T>(const T*, size_t, size_t, double, size_t, bool);  \
  template Factor factor_exact<T>(const T*, size_t, size_t, double, size_t, bool); \
  template Buffer project<T>(const Factor&, const T*, size_t, size_t);
SVC_T(float)
SVC_T(double)
#undef SVC_T

}  // namespace tt_detail
}  // namespace svc
