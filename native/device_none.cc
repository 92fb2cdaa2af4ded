// CPU-only builds (no nvcc at build time, or node-gyp): no CUDA code is compiled in.
#include "device.h"

namespace svc {

DeviceInfo cuda_probe() {
  DeviceInfo d;
  d.compiled = false;
  d.reason = "built without CUDA (nvcc was not found at build time, or the node-gyp fallback was used)";
  return d;
}

}  // namespace svc
