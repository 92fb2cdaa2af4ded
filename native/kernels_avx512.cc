// AVX-512 kernels; this file is compiled for that ISA by pragma, used only when the CPU has it.
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx2,fma")
#endif

#define KNS avx512_k
#define KNAME "avx512"
#define VLD 8
#define VLF 16
#define MRD 8
#define NVD 2
#define MRF 8
#define NVF 2
#define KSTREAM_F(p, v) _mm512_stream_ps(p, (__m512)(v))
#define KSTREAM_D(p, v) _mm512_stream_pd(p, (__m512d)(v))
#include "kernels.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace svc {
const Kernels& kernels_avx512() { return avx512_k::table; }
}  // namespace svc
#endif
