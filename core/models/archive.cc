#include "core/models/archive.h"

#include <nlohmann/json.hpp>

#include "core/amp/autocast.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "core/util/file.h"

namespace anvil::models {
namespace {

using Json = nlohmann::ordered_json;

io::Metadata MakeMetadata(const nn::StateDict& state, const std::string& spec_json, const ModelInfo& info) {
  Json j_info = {{"name", info.name},
                 {"version", info.version},
                 {"job_id", info.job_id},
                 {"labels", info.labels},
                 {"created_unix_ms", info.created_unix_ms},
                 {"precision", info.precision},
                 {"accuracy", info.accuracy}};
  Json aliases = Json::object();
  for (const auto& [alias, target] : state.aliases) aliases[alias] = target;
  return {{"anvil.format", kModelFormat},
          {"anvil.spec", spec_json},
          {"anvil.info", j_info.dump()},
          {"anvil.aliases", aliases.dump()}};
}

}  // namespace

std::string serialize_model_archive(const nn::Module& model, const std::string& spec_json, const ModelInfo& info) {
  const nn::StateDict state = model.state_dict();
  return io::serialize_safetensors(state.tensors, MakeMetadata(state, spec_json, info));
}

void save_model_archive(const std::string& path, const nn::Module& model, const std::string& spec_json,
                        const ModelInfo& info) {
  write_file_atomic(path, serialize_model_archive(model, spec_json, info));
}

LoadedModel load_model_archive(const std::string& path) {
  io::Safetensors file = io::load_safetensors(path);
  auto meta = [&](const char* key) -> const std::string& {
    const auto it = file.metadata.find(key);
    ANVIL_CHECK(it != file.metadata.end(), path, ": not an Anvil model archive (no \"", key,
                "\" in the safetensors metadata; a weights-only file needs its model spec)");
    return it->second;
  };
  ANVIL_CHECK(meta("anvil.format") == kModelFormat, path, ": archive format \"", meta("anvil.format"),
              "\" is not the supported \"", kModelFormat, "\"");
  LoadedModel out;
  try {
    out.built = build_model(meta("anvil.spec"));
  } catch (const Error& e) {
    throw Error(path + ": the archive's model spec does not build: " + e.what());
  }
  Json info;
  try {
    info = Json::parse(meta("anvil.info"));
    out.info.name = info.value("name", "");
    out.info.version = info.value("version", int64_t{0});
    out.info.job_id = info.value("job_id", "");
    out.info.labels = info.value("labels", std::vector<std::string>{});
    out.info.created_unix_ms = info.value("created_unix_ms", int64_t{0});
    out.info.precision = info.value("precision", std::string("fp32"));  // archives before mixed precision
    out.info.accuracy = info.value("accuracy", std::map<std::string, double>{});
  } catch (const Json::exception& e) {
    throw Error(path + ": bad \"anvil.info\" metadata: " + e.what());
  }
  try {
    (void)autocast::precision_dtype(out.info.precision);  // refused here, named, not when it serves
  } catch (const Error& e) {
    throw Error(path + ": bad \"anvil.info\" metadata: " + e.what());
  }
  nn::StateDict state;
  state.tensors = std::move(file.tensors);
  const auto aliases = file.metadata.find("anvil.aliases");
  if (aliases != file.metadata.end()) {
    try {
      const Json parsed = Json::parse(aliases->second);  // a named local: items() refers into it
      for (const auto& [alias, target] : parsed.items()) state.aliases[alias] = target.get<std::string>();
    } catch (const Json::exception& e) {
      throw Error(path + ": bad \"anvil.aliases\" metadata: " + e.what());
    }
  }
  try {
    out.built.module->load_state_dict(state, /*strict=*/true);
  } catch (const Error& e) {
    throw Error(path + ": weights do not match the archive's model spec: " + e.what());
  }
  out.built.module->eval();
  return out;
}

}  // namespace anvil::models
