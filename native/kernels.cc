// Run-time choice of the kernel set: the best the CPU has, or the level forced by SVC_TT_ISA.
#include "kernels.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace svc {
namespace {

std::string note;

const Kernels* pick() {
#ifdef SVC_HAVE_X86_KERNELS
  __builtin_cpu_init();
  bool has512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  bool has512 = false, has2 = false;
#endif
  const char* want = std::getenv("SVC_TT_ISA");
  std::string w = want ? want : "";
  if (w == "scalar") return &kernels_scalar();
#ifdef SVC_HAVE_X86_KERNELS
  if (w == "avx2") {
    if (has2) return &kernels_avx2();
    note = "SVC_TT_ISA=avx2 but the CPU lacks AVX2/FMA";
    return &kernels_scalar();
  }
  if (w == "avx512") {
    if (has512) return &kernels_avx512();
    note = "SVC_TT_ISA=avx512 but the CPU lacks AVX-512";
  } else if (!w.empty()) {
    note = "SVC_TT_ISA must be scalar, avx2 or avx512; using the best available";
  }
  if (has512) return &kernels_avx512();
  if (has2) return &kernels_avx2();
#else
  if (!w.empty()) note = "only scalar kernels are built for this architecture";
  (void)has512;
  (void)has2;
#endif
  return &kernels_scalar();
}

}  // namespace

const Kernels& K() {
  static const Kernels* k = pick();
  return *k;
}

void stream_fence() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_ia32_sfence();
#endif
}

const char* isa_note() {
  K();
  return note.c_str();
}

}  // namespace svc
