// Rank-revealing factorisations of an unfolding for TT-SVD: Gram eigensolver, randomized and QR + Jacobi routes.
#pragma once
#include <cstddef>
#include <vector>

#include "tt.h"

namespace svc {
namespace tt_detail {

struct Factor {
  size_t r = 0;
  bool identity = false;        // the whole row space is kept: Q = I, remainder = C
  std::vector<double> Q;        // m x r, orthonormal columns (empty when identity)
  double discarded = 0;         // squared Frobenius norm of what was cut
  bool capped = false;          // rmax cut the rank below what the budget needed
  bool right_identity = false;  // last step, full column rank kept: core = C, remainder = I
  double kept_min = 0;          // smallest kept squared singular value of the remainder Q^T C
};

// Factorisation of the m x N matrix C (see factor_exact and factor_random): the Gram route up to a
// shorter side of kEigFull, the randomized range finder above it. last: the final TT-SVD step.
template <typename T>
Factor factor_step(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last);
template <typename T>
Factor factor_step(const T* C, size_t m, size_t N, double delta2, size_t rmax) {
  return factor_step(C, m, N, delta2, rmax, false);
}
// The float64 Gram matrix of the shorter side and its eigen-decomposition, whatever the size.
template <typename T>
Factor factor_exact(const T* C, size_t m, size_t N, double delta2, size_t rmax, bool last);

// G (m x m) = C C^T in float64 for the m x N matrix C, m <= N (row-major, both); with amax (m at
// most 512), also the largest magnitude in C.
template <typename T>
void gram_rows(const T* C, size_t m, size_t N, double* G, double* amax = nullptr);
// The Gram route's factorisation of an unfolding with m <= N from its row Gram matrix G (g x g,
// overwritten): Q (g x r) spans the kept eigenvectors, or identity.
Factor factor_gram(std::vector<double>& G, size_t g, double delta2, size_t rmax);

// Truncated SVD of a small m x N float64 matrix by QR + one-sided Jacobi; the remainder Q^T C in rem.
Factor factor_precise(const double* C, size_t m, size_t N, double delta2, size_t rmax, std::vector<double>& rem);

// Remainder Q^T C (r x N) in the working type.
template <typename T>
Buffer project(const Factor& f, const T* C, size_t m, size_t N);

}  // namespace tt_detail
}  // namespace svc
