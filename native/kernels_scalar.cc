// Baseline kernels: plain vector code for the architecture's default ISA (SSE2 on x86-64).
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define KSTREAM_F(p, v) _mm_stream_ps(p, (__m128)(v))
#define KSTREAM_D(p, v) _mm_stream_pd(p, (__m128d)(v))
#else
#define KSTREAM_F(p, v) __builtin_memcpy(p, &(v), sizeof(v))
#define KSTREAM_D(p, v) __builtin_memcpy(p, &(v), sizeof(v))
#endif

#define KNS scalar_k
#define KNAME "scalar"
#define VLD 2
#define VLF 4
#define MRD 4
#define NVD 2
#define MRF 4
#define NVF 2
#include "kernels.inc"

namespace svc {
const Kernels& kernels_scalar() { return scalar_k::table; }
}  // namespace svc
