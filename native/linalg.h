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

namespace svc {

// The tridiagonal form of a symmetric matrix, A = P T P^T, and all its eigenvalues; eigenvectors
// for a range of them on request (sym_tridiag_vectors), at a cost that grows with how many.
struct SymTridiag {
  size_t n = 0;
  std::vector<double> W;     // row i starts with the Householder vector u_i of step i (i entries)
  std::vector<double> h;     // h[i] = |u_i|^2 / 2; 0 where step i reflected nothing
  std::vector<double> d, e;  // T: diagonal, and e[i] between entries i - 1 and i (e[0] = 0)
  std::vector<double> w;     // eigenvalues, descending
};

// Householder tridiagonalisation of the symmetric n x n A (row-major, not modified) and the
// eigenvalues of T by implicit QL.
void sym_tridiag(size_t n, const double* A, SymTridiag& t);

// Unit eigenvectors of the eigenvalues t.w[lo], ..., t.w[hi - 1] as the rows of vecs ((hi - lo) x n):
// inverse iteration on T (vectors of eigenvalues closer than 1e-3 |T| kept orthogonal by
// Gram-Schmidt), then P. Accurate to about eps |A| / gap, as the QL vectors of sym_eig.
void sym_tridiag_vectors(const SymTridiag& t, size_t lo, size_t hi, std::vector<double>& vecs);

// Orthonormal basis Q (g x (g - p), row-major) of the orthogonal complement of the span of the p
// orthonormal columns of D (g x p, row-major): Householder QR of D, its reflectors applied in
// blocks by GEMM.
void complement_basis(size_t g, size_t p, const double* D, std::vector<double>& Q);

}  // namespace svc
