// Device detection for builds with CUDA: reports the first usable GPU or why there is none.
// GPU kernels go next to this file (native/cuda/*.cu); CMake compiles every .cu here.
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "../device.h"

namespace svc {

DeviceInfo cuda_probe() {
  DeviceInfo d;
  d.compiled = true;
  const char* off = std::getenv("SVC_TT_CUDA");
  if (off && std::string(off) == "0") {
    d.reason = "disabled by SVC_TT_CUDA=0";
    return d;
  }
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    d.reason = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error state
    return d;
  }
  if (count == 0) {
    d.reason = "no CUDA device found";
    return d;
  }
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    d.reason = std::string("cannot query CUDA device 0: ") + cudaGetErrorString(err);
    return d;
  }
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  d.device = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
             std::to_string(prop.totalGlobalMem >> 20) + " MiB, CUDA runtime " + std::to_string(rt / 1000) + "." +
             std::to_string((rt % 1000) / 10) + ")";
  return d;
}

}  // namespace svc
