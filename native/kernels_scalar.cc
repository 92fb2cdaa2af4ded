// Baseline kernels: plain vector code for the architecture's default ISA (SSE2 on x86-64).
#include "kernels.h"

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
