// LinalgKernels for the baseline ISA, AVX2 and AVX-512 (linalg_simd.inc compiled three times),
// picked as kernels.h picks its kernels.
#include "linalg_simd.h"

#include <cstring>

#include "kernels.h"

#define LKNS scalar_lk
#include "linalg_simd.inc"
#undef LKNS

#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define LKNS avx2_lk
#include "linalg_simd.inc"
#undef LKNS
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx2,fma")
#endif
#define LKNS avx512_lk
#include "linalg_simd.inc"
#undef LKNS
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

namespace svc {

const LinalgKernels& LK() {
  static const LinalgKernels* k = [] {
#if defined(__x86_64__) || defined(_M_X64)
    const char* name = K().name;
    if (std::strcmp(name, "avx512") == 0) return &avx512_lk::table;
    if (std::strcmp(name, "avx2") == 0) return &avx2_lk::table;
#endif
    return &scalar_lk::table;
  }();
  return *k;
}

}  // namespace svc
