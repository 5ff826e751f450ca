// The digits CNN of examples/specs/digits-cnn.json as the service benchmarks train it: on the
// built-in digits dataset (8 x 8 images) in place of the example's CSV file of 64 columns.
//
// Thread-safety: a free function; shares nothing.
#pragma once

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::bench {

// False when `repo`/examples/specs/digits-cnn.json cannot be read as a JobSpec.
inline bool LoadDigitsCnnSpec(const std::string& repo, int epochs, v1::JobSpec* out) {
  std::ifstream in(repo + "/examples/specs/digits-cnn.json");
  std::stringstream text;
  text << in.rdbuf();
  v1::JobSpec cnn;
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &cnn).ok()) return false;
  cnn.mutable_dataset()->clear_path();
  cnn.mutable_dataset()->set_name("digits");
  cnn.set_model_json(
      std::regex_replace(cnn.model_json(), std::regex(R"("input_shape":\[64\],)"), R"("input_shape":[1,8,8],)"));
  cnn.set_model_json(
      std::regex_replace(cnn.model_json(), std::regex(R"(\{"type":"unflatten","shape":\[1,8,8\]\},)"), ""));
  cnn.set_epochs(epochs);
  *out = std::move(cnn);
  return true;
}

}  // namespace anvil::bench
