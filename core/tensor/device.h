// Where a tensor's memory lives. CPU today; the CUDA slot is part of every dispatch so no
// API assumes a CPU.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace anvil {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT
  // Parses "cpu", "cuda", "cuda:1"; throws on anything else.
  explicit Device(const std::string& spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

constexpr Device kCPU{DeviceType::CPU, 0};
inline Device CUDA(int index = 0) { return Device(DeviceType::CUDA, index); }

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace anvil
