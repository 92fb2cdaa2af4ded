// Small dense float64 linear algebra for TT-SVD: symmetric eigensolver and Householder QR.
#pragma once
#include <cstddef>
#include <vector>

namespace svc {

// Eigen-decomposition of the symmetric n x n matrix A (row-major, overwritten).
// Eigenvalues come out in descending order in w; when vecs is non-null, row j of
// vecs (n x n) is the unit eigenvector of w[j]. Householder tridiagonalisation + implicit QL.
void sym_eig(size_t n, double* A, double* w, double* vecs);

// Householder QR of the m x n matrix A (row-major, not modified), k = min(m, n):
// Q is m x k with orthonormal columns, R is k x n upper triangular.
void qr(size_t m, size_t n, const double* A, std::vector<double>& Q, std::vector<double>& R);

// Cholesky factor of the symmetric positive definite n x n matrix G (G = R^T R, R upper
// triangular), returned as R^{-1} in Rinv (n x n). False when a pivot falls to `floor` times its
// diagonal entry or below (G numerically singular for the purpose): the caller falls back.
bool chol_inverse(size_t n, const double* G, double* Rinv, double floor);

// One-sided Jacobi SVD of the rows x cols matrix A (rows >= cols, row-major): A = U diag(S) V^T,
// S descending; U is rows x cols, V is cols x cols. Accurate to relative precision down to 1e-15
// of |A|_F (pairs of columns below that are not rotated), for small matrices.
void jacobi_svd(size_t rows, size_t cols, const double* A, std::vector<double>& U, std::vector<double>& S,
                std::vector<double>& V);

}  // namespace svc
