// AVX2 + FMA kernels; this file is compiled for that ISA by pragma, used only when the CPU has it.
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#define KNS avx2_k
#define KNAME "avx2"
#define VLD 4
#define VLF 8
#define MRD 6
#define NVD 2
#define MRF 6
#define NVF 2
#define KSTREAM_F(p, v) _mm256_stream_ps(p, (__m256)(v))
#define KSTREAM_D(p, v) _mm256_stream_pd(p, (__m256d)(v))
#include "kernels.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace svc {
const Kernels& kernels_avx2() { return avx2_k::table; }
}  // namespace svc
#endif
