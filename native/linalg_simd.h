// The level-2 loops of the partial symmetric eigensolver (linalg.cc), compiled for each ISA of
// kernels.h and picked with it (SVC_TT_ISA included): plain loops, the compiler vectorises them.
#pragma once
#include <cstddef>

namespace svc {

struct LinalgKernels {
  // Rows [j0, j1) of the leading b x b block of W (row j holds entries k >= j of a symmetric
  // matrix's column j, row stride n): W[j][k] -= u[j] q[k] + q[j] u[k] for k in [j, b). With x,
  // also acc += (the updated block) x, over these rows' entries.
  void (*band)(double* W, size_t n, size_t b, size_t j0, size_t j1, const double* u, const double* q, const double* x,
               double* acc);
  // y = (the leading b x b block of W, stored as for band) x.
  void (*symv)(const double* W, size_t n, size_t b, const double* x, double* y);
  // Each of the rows of Z (stride n) multiplied by P_{n-1} ... P_1, P_i = I - u_i u_i^T / h[i] with u_i
  // the first i entries of row i of W (h[i] = 0: no reflection).
  void (*reflect)(const double* W, const double* h, size_t n, double* Z, size_t rows);
  // x minus its components along the orthonormal rows [r0, r1) of Z (stride n), twice.
  void (*reorth)(const double* Z, size_t n, size_t r0, size_t r1, double* x);
};

const LinalgKernels& LK();

}  // namespace svc
