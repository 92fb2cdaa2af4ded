// CPU-only builds (no nvcc at build time, or node-gyp): no CUDA code is compiled in.
#include "device.h"
#include "gpu.h"

namespace svc {

DeviceInfo cuda_probe() {
  DeviceInfo d;
  d.compiled = false;
  d.reason = "built without CUDA (no nvcc at build time, SVC_WITH_CUDA=OFF, or the node-gyp fallback)";
  return d;
}

}  // namespace svc

// The GPU functions of native/gpu.h without CUDA: every call says why there is no device.
namespace svc {
namespace gpu {
namespace {
[[noreturn]] void none() {
  throw TTError("gpu_unavailable", "",
                "CUDA not compiled in (no nvcc at build time, SVC_WITH_CUDA=OFF, or the node-gyp fallback)");
}
}  // namespace
Loaded load(const std::vector<const float*>&, const std::vector<size_t>&, const std::vector<size_t>&) { none(); }
bool release(uint64_t) { return false; }
Buffer reconstruct(uint64_t, const std::vector<size_t>&, const std::vector<size_t>&,
                   const std::vector<std::pair<size_t, size_t>>&) {
  none();
}
double reconstruct_timed(uint64_t, size_t) { none(); }
double dot(uint64_t, uint64_t) { none(); }
double dot_dense(uint64_t, const float*, size_t) { none(); }
size_t topk(uint64_t, const std::vector<uint64_t>&, const std::vector<double>&, const std::string&, size_t, uint32_t*,
            double*) {
  none();
}
std::pair<size_t, size_t> memory() { none(); }
}  // namespace gpu
}  // namespace svc
