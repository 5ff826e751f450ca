// Training checkpoints: see checkpoint.h.
#include "core/train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/ops/functions.h"
#include "core/tensor/random.h"
#include "core/util/error.h"
#include "core/util/file.h"

namespace anvil::train {
namespace {

using Json = nlohmann::ordered_json;
constexpr const char* kFormat = "anvil-checkpoint-1";

uint32_t Crc32(std::string_view data, uint32_t crc = 0) {
  uLong c = crc;
  while (!data.empty()) {
    const auto n = static_cast<uInt>(std::min<size_t>(data.size(), 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(data.data()), n);
    data.remove_prefix(n);
  }
  return static_cast<uint32_t>(c);
}

std::string Hex(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The data region of a serialized safetensors file (after the header).
std::string_view DataRegion(std::string_view bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return bytes.substr(8 + n);
}

struct Parsed {
  io::Safetensors file;
  Json state;
};

// Reads, checks the format and the checksum.
Parsed Read(const std::string& path) {
  const std::string bytes = read_file(path);
  Parsed p{io::parse_safetensors(bytes, path), {}};
  const auto& meta = p.file.metadata;
  ANVIL_CHECK(meta.count("anvil.format") && meta.at("anvil.format") == kFormat, path,
              ": not an Anvil training checkpoint (expected metadata anvil.format = ", kFormat, ")");
  ANVIL_CHECK(meta.count("anvil.state") && meta.count("anvil.crc32"), path, ": the checkpoint's state is missing");
  const std::string& state = meta.at("anvil.state");
  const std::string crc = Hex(Crc32(state, Crc32(DataRegion(bytes))));
  ANVIL_CHECK(crc == meta.at("anvil.crc32"), path, ": checksum mismatch (stored ", meta.at("anvil.crc32"),
              ", computed ", crc, "): the file is corrupt; nothing was loaded");
  try {
    p.state = Json::parse(state);
  } catch (const std::exception& e) {
    throw Error(path + ": the checkpoint's state is not valid JSON: " + e.what());
  }
  return p;
}

nn::StateDict ModelState(const Parsed& p) {
  nn::StateDict sd;
  for (const auto& [name, t] : p.file.tensors) {
    if (name.rfind("model/", 0) == 0) sd.tensors.emplace_back(name.substr(6), t);
  }
  for (const auto& [alias, target] : p.state.at("model_aliases").items()) sd.aliases[alias] = target.get<std::string>();
  return sd;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const TrainingState& state) {
  io::NamedTensors tensors;
  const nn::StateDict sd = model.state_dict();
  // On the CPU once: the checksum below reads the bytes on the host (a model on a GPU too).
  for (const auto& [k, t] : sd.tensors) tensors.emplace_back("model/" + k, t.detach().to(kCPU));
  const optim::OptimizerState os = optimizer.state_dict();
  Json params = Json::object();
  for (const auto& [index, ps] : os.params) {
    params[std::to_string(index)] = ps.step;
    for (const auto& [buffer, t] : ps.buffers) {
      tensors.emplace_back("optim/" + std::to_string(index) + "/" + buffer, t.detach().to(kCPU));
    }
  }
  for (const auto& [k, t] : state.best_weights.tensors) tensors.emplace_back("best/" + k, t.detach().to(kCPU));
  Json history = Json::array();
  for (const auto& m : state.history) history.push_back({m.step, m.name, m.value});
  const Json j = {
      {"step", state.step},
      {"loader", {{"epoch", state.loader.epoch}, {"batch", state.loader.batch}, {"seed", state.loader_seed}}},
      {"rng", {state.rng.first, state.rng.second}},
      {"scheduler_step", state.scheduler_step},
      {"optimizer", {{"name", optimizer.name()}, {"groups", os.groups}, {"param_steps", params}}},
      {"model_aliases", sd.aliases},
      {"history", history},
      {"history_stride", state.history_stride},
      {"history_pending", state.history_pending},
      // The best value as its IEEE-754 bits: exact, and JSON has no infinity.
      {"early_stopping",
       {{"best_bits", state.best_metric ? Json(std::bit_cast<uint64_t>(*state.best_metric)) : Json(nullptr)},
        {"bad_epochs", state.bad_epochs}}},
      {"extra", state.extra},
  };
  const std::string state_json = j.dump();
  // The checksum covers the data region: the tensors' bytes back to back, in this order.
  uint32_t data_crc = 0;
  for (const auto& [name, t] : tensors) {
    const Tensor c = t.detach().contiguous();
    data_crc =
        Crc32({static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * itemsize(c.dtype()))}, data_crc);
  }
  const uint32_t crc = Crc32(state_json, data_crc);
  io::save_safetensors(path, tensors,
                       {{"anvil.format", kFormat}, {"anvil.state", state_json}, {"anvil.crc32", Hex(crc)}});
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer) {
  const Parsed p = Read(path);
  const Json& j = p.state;
  // Optimizer state first, checked against the live optimizer before anything is written.
  optim::OptimizerState os;
  ANVIL_CHECK(j.at("optimizer").at("name").get<std::string>() == optimizer.name(), path,
              ": the checkpoint was written "
              "by ",
              j.at("optimizer").at("name").get<std::string>(), ", not ", optimizer.name());
  for (const auto& g : j.at("optimizer").at("groups")) os.groups.push_back(g.get<optim::Options>());
  for (const auto& [index, step] : j.at("optimizer").at("param_steps").items()) {
    os.params[std::stoll(index)].step = step.get<int64_t>();
  }
  for (const auto& [name, t] : p.file.tensors) {
    if (name.rfind("optim/", 0) != 0) continue;
    const auto slash = name.find('/', 6);
    ANVIL_CHECK(slash != std::string::npos, path, ": bad optimizer tensor name '", name, "'");
    os.params[std::stoll(name.substr(6, slash - 6))].buffers[name.substr(slash + 1)] = t;
  }
  const nn::StateDict sd = ModelState(p);
  // Each load validates before it writes. The optimizer goes first, with a snapshot (its
  // state_dict clones the buffers) to put back if the model's load is then refused, so a
  // mismatched file changes neither. (A model snapshot would be views of the live tensors.)
  const optim::OptimizerState optimizer_before = optimizer.state_dict();
  optimizer.load_state_dict(os);
  try {
    model.load_state_dict(sd);
  } catch (...) {
    optimizer.load_state_dict(optimizer_before);
    throw;
  }
  TrainingState s;
  s.step = j.at("step").get<int64_t>();
  s.loader = {j.at("loader").at("epoch").get<int64_t>(), j.at("loader").at("batch").get<int64_t>()};
  s.loader_seed = j.at("loader").at("seed").get<uint64_t>();
  s.rng = {j.at("rng")[0].get<uint64_t>(), j.at("rng")[1].get<uint64_t>()};
  s.scheduler_step = j.at("scheduler_step").get<int64_t>();
  for (const auto& m : j.at("history"))
    s.history.push_back({m[0].get<int64_t>(), m[1].get<std::string>(), m[2].get<double>()});
  s.history_stride = j.value("history_stride", int64_t{1});  // absent before histories were bounded
  s.history_pending = j.value("history_pending", int64_t{0});
  if (j.contains("early_stopping")) {  // absent before early stopping was checkpointed
    const Json& es = j.at("early_stopping");
    if (!es.at("best_bits").is_null()) s.best_metric = std::bit_cast<double>(es.at("best_bits").get<uint64_t>());
    s.bad_epochs = es.at("bad_epochs").get<int64_t>();
  }
  for (const auto& [name, t] : p.file.tensors) {
    if (name.rfind("best/", 0) == 0) s.best_weights.tensors.emplace_back(name.substr(5), t);
  }
  s.extra = j.at("extra").get<std::map<std::string, std::string>>();
  default_generator().set_state(s.rng.first, s.rng.second);
  return s;
}

void load_model_from_checkpoint(const std::string& path, nn::Module& model) {
  model.load_state_dict(ModelState(Read(path)));
}

std::string checkpoint_generation(const std::string& path, int generation) {
  if (generation == 0) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "." + std::to_string(generation) + p.extension().string())).string();
}

void rotate_checkpoints(const std::string& path, int keep) {
  if (keep <= 1) return;
  std::error_code ec;
  std::filesystem::remove(checkpoint_generation(path, keep - 1), ec);
  for (int g = keep - 2; g >= 0; --g) {
    const std::string from = checkpoint_generation(path, g);
    if (std::filesystem::exists(from, ec)) std::filesystem::rename(from, checkpoint_generation(path, g + 1), ec);
  }
}

std::vector<std::string> existing_checkpoints(const std::string& path, int keep) {
  std::vector<std::string> out;
  std::error_code ec;
  for (int g = 0; g < std::max(keep, 1); ++g) {
    const std::string p = checkpoint_generation(path, g);
    if (std::filesystem::exists(p, ec)) out.push_back(p);
  }
  return out;
}

bool all_finite(const nn::Module& model, const optim::Optimizer& optimizer) {
  auto finite = [](const Tensor& t) {
    if (!t.defined() || !is_floating_point(t.dtype()) || t.numel() == 0) return true;
    return all(isfinite(t.detach())).item<bool>();
  };
  for (const Tensor& p : model.parameters()) {
    if (!finite(p)) return false;
  }
  for (const auto& [index, ps] : optimizer.state_dict().params) {
    for (const auto& [name, t] : ps.buffers) {
      if (!finite(t)) return false;
    }
  }
  return true;
}

}  // namespace anvil::train
