// Cache-blocked, multithreaded GEMM over strided operands: C (+)= A * B.
// A is M x K with element (i, p) at A[i*rsA + p*csA]; B is K x N likewise; C is M x N, row stride ldc.
// Operands are converted to TC while packing, so float data can be accumulated in double.
#pragma once
#include <cstddef>

namespace svc {

template <typename TA, typename TB, typename TC>
void gemm(size_t M, size_t N, size_t K, const TA* A, ptrdiff_t rsA, ptrdiff_t csA, const TB* B, ptrdiff_t rsB,
          ptrdiff_t csB, TC* C, size_t ldc, bool accumulate, bool parallel = true);

}  // namespace svc
