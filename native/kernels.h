// Inner kernels compiled once per instruction set (kernels_*.cc) and picked at run time.
#pragma once
#include <cstddef>

namespace svc {

struct Kernels {
  const char* name;
  int mr_d, nr_d, mr_f, nr_f;  // register tile of the GEMM micro-kernels
  // C[mr x nr] (+)= A_panel(kc x MR) * B_panel(kc x NR); packed panels, row stride ldc.
  // stream: write full tiles with non-temporal stores (C rows 64-byte aligned, no accumulate).
  void (*mk_d)(size_t kc, const double* a, const double* b, double* c, size_t ldc, size_t mr, size_t nr, bool acc,
               bool stream);
  void (*mk_f)(size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t mr, size_t nr, bool acc,
               bool stream);
  // Reductions accumulated in float64.
  double (*dot_ff)(const float* a, const float* b, size_t n);
  double (*dot_dd)(const double* a, const double* b, size_t n);
  double (*sqdiff_ff)(const float* a, const float* b, size_t n);
  double (*sqdiff_dd)(const double* a, const double* b, size_t n);
  // Largest |x| (NaN when x holds NaN or infinities) and the sum of squares in float64.
  void (*scan_f)(const float* x, size_t n, double* amax, double* ss);
  void (*scan_d)(const double* x, size_t n, double* amax, double* ss);
  // G (m x m, row-major) += C C^T over the first kc columns of the m rows of C (row stride ldc),
  // in float64, upper triangle and diagonal only; X: scratch of (m + 12) * (kc rounded up to a
  // multiple of 64, plus 8) doubles whose rows m and above are zero. With amax, also *amax =
  // max(*amax, largest |entry|).
  void (*gram_f)(size_t m, size_t kc, const float* C, size_t ldc, double* X, double* G, double* amax);
  void (*gram_d)(size_t m, size_t kc, const double* C, size_t ldc, double* X, double* G, double* amax);
  // Squared distance in float64 between D (m x w, row stride ldd) and L R (L: m x r, R: r x w,
  // row strides ldl, ldr), the product formed in the working type.
  double (*lr_sqdiff_f)(size_t m, size_t w, size_t r, const float* L, size_t ldl, const float* R, size_t ldr,
                        const float* D, size_t ldd);
  double (*lr_sqdiff_d)(size_t m, size_t w, size_t r, const double* L, size_t ldl, const double* R, size_t ldr,
                        const double* D, size_t ldd);
};

const Kernels& kernels_scalar();
#if defined(__x86_64__) || defined(_M_X64)
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();
#define SVC_HAVE_X86_KERNELS 1
#endif

// The kernels in use: the best the CPU supports, or SVC_TT_ISA=scalar|avx2|avx512.
const Kernels& K();
// Orders non-temporal stores before later loads/stores (no-op off x86).
void stream_fence();
// Why the ISA differs from the one requested in SVC_TT_ISA, or empty.
const char* isa_note();

}  // namespace svc
