// Rank probing for min_ratio: sampled lower bounds on the TT-SVD ranks that prove a ratio unreachable early.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace svc {
namespace tt_detail {

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
  std::vector<size_t> modes, M;  // M[k] = n_1 ... n_k
  size_t n = 0, cap = 0;
  double delta2 = 0, margin = 0;
  std::vector<std::vector<double>> w;  // per unfolding: sampled squared singular values, descending
  std::vector<size_t> boost;           // per unfolding: a rank to assume instead of the sampled bound (0: none)

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
    for (size_t k = 1; k < d; ++k) L[k] = double(std::min(rho(k, double(d - 1) * delta2), smax(k)));
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
bool probe_gives_up(const T* data, RankProbe& P, double min_ratio);

}  // namespace tt_detail
}  // namespace svc
