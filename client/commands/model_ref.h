// NAME[:VERSION], as the model subcommands take a model; without a version, "latest".
#pragma once

#include <string>

namespace anvil::client {

struct ModelRef {
  std::string name, version;
};

inline ModelRef parse_model_ref(const std::string& ref) {
  const size_t colon = ref.rfind(':');
  return {colon == std::string::npos ? ref : ref.substr(0, colon),
          colon == std::string::npos ? "latest" : ref.substr(colon + 1)};
}

}  // namespace anvil::client
