// A JobSpec as JSON (the CLI's submit file; the protobuf JSON mapping), then the server's
// validation with its defaults, the model spec's pricing and the dataset path's resolution
// inside a data root.
#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <string>

#include "proto/anvil/v1/anvil.pb.h"
#include "server/job_spec.h"
#include "server/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    const auto dir = std::filesystem::temp_directory_path() / "anvil-fuzz-job-spec";
    std::filesystem::create_directories(dir);
    return std::filesystem::canonical(dir).string();
  }();
  anvil::v1::JobSpec spec;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!google::protobuf::util::JsonStringToMessage(text, &spec).ok()) return 0;
  try {
    (void)anvil::server::validate_job_spec(spec, {root, {"cpu"}, int64_t{1} << 30});
  } catch (const anvil::server::ServiceError&) {
  }
  return 0;
}
