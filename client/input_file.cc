#include "client/input_file.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/data/datasets/image_folder.h"
#include "core/data/transforms.h"
#include "core/ops/functions.h"

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

bool IsImage(std::string path) {
  for (char& c : path) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return EndsWith(path, ".png") || EndsWith(path, ".jpg") || EndsWith(path, ".jpeg") || EndsWith(path, ".bmp");
}

// One image as the model's input [1, *input_shape], float32 in [0, 1]; `note` says whether it
// was resized.
std::vector<float> ImageSample(const std::string& path, const std::vector<int64_t>& shape, std::string* note) {
  int64_t c = 0, h = 0, w = 0;
  if (shape.size() == 3 && shape[0] >= 1 && shape[0] <= 4) {
    c = shape[0];
    h = shape[1];
    w = shape[2];
  } else if (shape.size() == 1) {
    const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(shape[0]))));
    if (side * side != shape[0]) {
      throw std::runtime_error(path + ": the model takes " + std::to_string(shape[0]) +
                               " features, not an image (expected [C, H, W] or a square number of pixels)");
    }
    c = 1;
    h = w = side;
  } else {
    throw std::runtime_error(path + ": the model's input is not an image shape ([C, H, W] or [H*W])");
  }
  anvil::Tensor img;
  try {
    img = anvil::data::read_image(path, static_cast<int>(c)).permute({2, 0, 1}).to(anvil::kFloat32) / 255.0;
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
  if (img.size(1) != h || img.size(2) != w) {
    const int64_t from_h = img.size(1), from_w = img.size(2);
    // Aspect ratios compared without division: from_w / from_h against w / h.
    const bool stretched = from_w * h != w * from_h;
    *note = path + ": resized " + std::to_string(from_w) + "x" + std::to_string(from_h) + " -> " + std::to_string(w) +
            "x" + std::to_string(h) + " (bilinear" + (stretched ? ", aspect ratio not kept" : "") +
            ") to fit the model's input";
    img = anvil::data::Resize(h, w)(img);
  }
  const anvil::Tensor flat = img.contiguous().reshape({-1});
  return flat.to_vector<float>();
}

v1::Tensor AsTensor(const std::vector<float>& values, int64_t samples, const std::vector<int64_t>& input_shape) {
  v1::Tensor t;
  t.set_name("input");
  t.set_dtype(v1::FLOAT32);
  t.add_shape(samples);
  for (int64_t d : input_shape) t.add_shape(d);
  t.set_raw(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return t;
}

std::vector<std::string> SplitCells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

bool ParseNumber(const std::string& cell, float* v) {
  char* end = nullptr;
  *v = std::strtof(cell.c_str(), &end);
  if (end == cell.c_str()) return false;
  while (*end == ' ' || *end == '\t' || *end == '\r') ++end;
  return *end == '\0';
}

// The label column's index in a row of `width` cells, from "" (none: -1), an index or a
// header name.
int64_t LabelIndex(const std::string& column, const std::vector<std::string>& header, int64_t width,
                   const std::string& where) {
  if (column.empty()) return -1;
  char* end = nullptr;
  const long long index = std::strtoll(column.c_str(), &end, 10);
  if (end != column.c_str() && *end == '\0') {
    const int64_t i = index < 0 ? width + index : index;
    if (i < 0 || i >= width) {
      throw std::runtime_error(where + ": --label-column " + column + ": the rows have " + std::to_string(width) +
                               " columns (0.." + std::to_string(width - 1) + ", or -1 for the last)");
    }
    return i;
  }
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == column) return static_cast<int64_t>(i);
  }
  throw std::runtime_error(
      where + ": --label-column \"" + column +
      "\": " + (header.empty() ? std::string("the file has no header row to name it") : "not in the header row"));
}

}  // namespace

InputFile read_input_file(const std::string& path, const std::vector<int64_t>& input_shape,
                          const std::string& label_column) {
  const bool csv = !IsImage(path) && !EndsWith(path, ".json");
  if (!label_column.empty() && !csv) {
    throw std::runtime_error("--label-column: only for CSV input, got \"" + path + "\"");
  }
  InputFile result;
  if (IsImage(path)) {
    result.tensor = AsTensor(ImageSample(path, input_shape, &result.note), 1, input_shape);
    return result;
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--input: cannot read \"" + path + "\": " + std::strerror(errno));
  int64_t per_sample = 1;
  for (int64_t d : input_shape) per_sample *= d;
  std::vector<float> values;
  int64_t samples = 0;
  if (!csv) {
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
                                 std::to_string(per_sample) + " numbers, got " +
                                 std::to_string(values.size() - before));
      }
      ++samples;
    }
  } else {
    std::string line;
    int64_t line_no = 0;
    std::vector<std::string> header;
    char* end = nullptr;
    (void)std::strtoll(label_column.c_str(), &end, 10);
    const bool by_name = !label_column.empty() && (end == label_column.c_str() || *end != '\0');
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      const std::vector<std::string> cells = SplitCells(line);
      const std::string where = path + ":" + std::to_string(line_no);
      // A label column named by its header: the first row is that header.
      if (by_name && header.empty() && samples == 0) {
        header = cells;
        continue;
      }
      // The label cell may be anything (a class name); every other cell is a number, except
      // in a header row (the first row with a cell that is not).
      const int64_t label =
          label_column.empty() ? -1 : LabelIndex(label_column, header, static_cast<int64_t>(cells.size()), where);
      std::vector<float> row;
      bool numeric = true;
      for (size_t c = 0; c < cells.size(); ++c) {
        if (static_cast<int64_t>(c) == label) continue;
        float v = 0;
        if (!ParseNumber(cells[c], &v)) {
          numeric = false;
          break;
        }
        row.push_back(v);
      }
      if (!numeric) {
        if (samples == 0 && header.empty()) {  // a header
          header = cells;
          continue;
        }
        throw std::runtime_error(where + ": expected numbers, got \"" + line + "\"");
      }
      if (static_cast<int64_t>(row.size()) != per_sample) {
        std::string hint;
        if (label < 0 && static_cast<int64_t>(row.size()) == per_sample + 1) {
          hint = " (one more: a label column? name it with --label-column)";
        }
        throw std::runtime_error(where + ": expected " + std::to_string(per_sample) +
                                 " values per row (the model's input), got " + std::to_string(row.size()) + hint);
      }
      if (label >= 0) result.labels.push_back(cells[static_cast<size_t>(label)]);
      values.insert(values.end(), row.begin(), row.end());
      ++samples;
    }
  }
  if (samples == 0) throw std::runtime_error(path + ": no samples");
  result.tensor = AsTensor(values, samples, input_shape);
  return result;
}

}  // namespace anvil::client
