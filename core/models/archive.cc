#include "core/models/archive.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/amp/autocast.h"
#include "core/io/safetensors.h"
#include "core/quant/quantize.h"
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
  if (!info.quantization.empty()) j_info["quantization"] = info.quantization;
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
  io::Metadata metadata = MakeMetadata(state, spec_json, info);
  if (!quant::is_quantized(model)) return io::serialize_safetensors(state.tensors, metadata);
  // An int8 model: its float layers' state as usual, the quantized layers' tensors as
  // quantized companions, and the rewrite that turns the spec's float model into this one.
  io::NamedTensors tensors = state.tensors;
  quant::append_quantized_state(model, &tensors, &metadata);
  metadata["anvil.quant"] = quant::describe_quantization(model);
  return io::serialize_safetensors(tensors, metadata);
}

ScalarType forward_dtype(const ModelInfo& info) {
  // An int8 model's layers take and return float32; its precision is its weights'.
  if (info.precision == "int8") return kFloat32;
  return autocast::precision_dtype(info.precision);
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
    out.info.quantization = info.value("quantization", std::string());
  } catch (const Json::exception& e) {
    throw Error(path + ": bad \"anvil.info\" metadata: " + e.what());
  }
  try {
    // Refused here, named, not when it serves.
    ANVIL_CHECK(out.info.precision != "int8" || file.metadata.count("anvil.quant"),
                "precision \"int8\" on a model with no quantized layers");
    (void)forward_dtype(out.info);
  } catch (const Error& e) {
    throw Error(path + ": bad \"anvil.info\" metadata: " + e.what());
  }
  nn::StateDict state;
  const auto quantized = file.metadata.find("anvil.quant");
  if (quantized != file.metadata.end()) {
    std::vector<std::string> consumed;
    try {
      quant::apply_quantization(*out.built.module, quantized->second, file, &consumed);
    } catch (const Error& e) {
      throw Error(path + ": the archive's int8 layers do not fit its model spec: " + e.what());
    }
    // What the quantized layers took is not the float layers' state.
    std::sort(consumed.begin(), consumed.end());
    io::NamedTensors rest;
    for (auto& [name, t] : file.tensors)
      if (!std::binary_search(consumed.begin(), consumed.end(), name)) rest.emplace_back(name, std::move(t));
    file.tensors = std::move(rest);
  }
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
