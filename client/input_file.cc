#include "client/input_file.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace anvil::client {
namespace {

void Flatten(const nlohmann::json& j, std::vector<float>& out, const std::string& where) {
  if (j.is_number()) {
    out.push_back(j.get<float>());
  } else if (j.is_array()) {
    for (const auto& e : j) Flatten(e, out, where);
  } else {
    throw std::runtime_error(where + ": expected numbers, got " + std::string(j.type_name()));
  }
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

v1::Tensor read_input_file(const std::string& path, const std::vector<int64_t>& input_shape) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--input: cannot read \"" + path + "\"");
  int64_t per_sample = 1;
  for (int64_t d : input_shape) per_sample *= d;
  std::vector<float> values;
  int64_t samples = 0;
  if (EndsWith(path, ".json")) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(path + ": not valid JSON: " + e.what());
    }
    if (!j.is_array()) throw std::runtime_error(path + ": expected a JSON array of samples");
    for (const auto& sample : j) {
      const size_t before = values.size();
      Flatten(sample, values, path + " sample " + std::to_string(samples));
      if (static_cast<int64_t>(values.size() - before) != per_sample) {
        throw std::runtime_error(path + " sample " + std::to_string(samples) + ": expected " +
                                 std::to_string(per_sample) + " numbers, got " + std::to_string(values.size() - before));
      }
      ++samples;
    }
  } else {
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty() || line[0] == '#') continue;
      std::vector<float> row;
      std::stringstream ss(line);
      std::string cell;
      bool numeric = true;
      while (std::getline(ss, cell, ',')) {
        char* end = nullptr;
        const float v = std::strtof(cell.c_str(), &end);
        if (end == cell.c_str()) {
          numeric = false;
          break;
        }
        row.push_back(v);
      }
      if (!numeric) {
        if (samples == 0 && values.empty()) continue;  // a header
        throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected numbers, got \"" + line + "\"");
      }
      if (static_cast<int64_t>(row.size()) != per_sample) {
        throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected " + std::to_string(per_sample) +
                                 " values per row (the model's input), got " + std::to_string(row.size()));
      }
      values.insert(values.end(), row.begin(), row.end());
      ++samples;
    }
  }
  if (samples == 0) throw std::runtime_error(path + ": no samples");
  v1::Tensor t;
  t.set_name("input");
  t.set_dtype(v1::FLOAT32);
  t.add_shape(samples);
  for (int64_t d : input_shape) t.add_shape(d);
  t.set_raw(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return t;
}

}  // namespace anvil::client
