#include "core/tensor/device.h"

#include "core/util/error.h"

namespace anvil {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = Device(DeviceType::CPU, 0);
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    int idx = 0;
    if (spec.size() > 4) {
      ANVIL_CHECK(spec[4] == ':' && spec.size() > 5 && spec.find_first_not_of("0123456789", 5) == std::string::npos,
                  "Device: expected 'cpu', 'cuda' or 'cuda:N', got '", spec, "'");
      idx = std::stoi(spec.substr(5));
    }
    *this = Device(DeviceType::CUDA, idx);
    return;
  }
  throw Error("Device: expected 'cpu', 'cuda' or 'cuda:N', got '" + spec + "'");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace anvil
