#include "tests/paths.h"

namespace anvil::test {

const std::string& SourceDir() {
  static const std::string dir = ANVIL_SOURCE_DIR;
  return dir;
}

const std::string& BinaryDir() {
  static const std::string dir = ANVIL_BINARY_DIR;
  return dir;
}

std::string PeerPython() { return SourceDir() + "/.venv/bin/python"; }

std::string TestDataDir() { return SourceDir() + "/data"; }

const std::string& FakeNvmlPath() {
  static const std::string path = ANVIL_FAKE_NVML_PATH;
  return path;
}

}  // namespace anvil::test
