// What the CUDA side can offer: compiled in or not, the device found, or why none is used.
#pragma once
#include <string>

namespace svc {

struct DeviceInfo {
  bool compiled = false;
  std::string device;  // empty when none is used
  std::string reason;  // why no device is used, empty when one is
};

DeviceInfo cuda_probe();

}  // namespace svc
