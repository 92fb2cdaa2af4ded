// CPU-only builds (no nvcc at build time, or node-gyp): no CUDA code is compiled in.
#include "device.h"

namespace svc {

DeviceInfo cuda_probe() {
  DeviceInfo d;
  d.compiled = false;
  d.reason = "built without CUDA (no nvcc at build time, SVC_WITH_CUDA=OFF, or the node-gyp fallback)";
  return d;
}

}  // namespace svc
