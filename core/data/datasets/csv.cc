#include "core/data/datasets/csv.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>

#include "core/data/datasets/file_io.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "core/util/interruption.h"
#include "core/util/utf8.h"

namespace anvil::data {
namespace {

struct Line {
  int64_t number;  // 1-based, counting every physical line
  std::string_view text;
};

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

// The file's lines without their line ends; blank lines at the end are dropped, blank lines
// before data are an error (they usually mean a damaged or concatenated file).
std::vector<Line> SplitLines(std::string_view content, const std::string& path) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (content.substr(0, kBom.size()) == kBom) content.remove_prefix(kBom.size());
  // Headers, class names and values become JSON, protobuf strings and stored rows: the file
  // must be UTF-8 (ASCII is), refused here with the line and the byte in it otherwise.
  if (const size_t bad = utf8_error_offset(content); bad != std::string_view::npos) {
    const std::string_view before = content.substr(0, bad);
    const int64_t line = 1 + std::count(before.begin(), before.end(), '\n');
    const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
    const size_t line_end = std::min(content.find('\n', bad), content.size());
    check_utf8(content.substr(line_start, line_end - line_start), detail::StrCat(path, ":", line));
  }
  std::vector<Line> lines;
  int64_t number = 0;
  while (!content.empty()) {
    if ((number & 0xFFFF) == 0) interruption_point();  // every 65536 lines
    const size_t end = content.find('\n');
    std::string_view text = content.substr(0, end);
    content.remove_prefix(end == std::string_view::npos ? content.size() : end + 1);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    lines.push_back({++number, text});
  }
  while (!lines.empty() && IsBlank(lines.back().text)) lines.pop_back();
  for (const Line& line : lines) {
    ANVIL_CHECK(!IsBlank(line.text), path, ":", line.number, ": blank line (only trailing blank lines are allowed)");
  }
  return lines;
}

// Splits one line into fields, removing quotes and the spaces around unquoted fields.
std::vector<std::string> SplitFields(const Line& line, char delim, const std::string& path) {
  auto is_space = [delim](char c) { return (c == ' ' || c == '\t') && c != delim; };
  std::vector<std::string> fields;
  std::string_view rest = line.text;
  for (;;) {
    const int64_t column = static_cast<int64_t>(fields.size()) + 1;
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    std::string field;
    if (!rest.empty() && rest.front() == '"') {
      rest.remove_prefix(1);
      bool closed = false;
      while (!rest.empty()) {
        const char c = rest.front();
        rest.remove_prefix(1);
        if (c != '"') {
          field.push_back(c);
        } else if (!rest.empty() && rest.front() == '"') {
          field.push_back('"');  // "" inside quotes is one quote
          rest.remove_prefix(1);
        } else {
          closed = true;
          break;
        }
      }
      ANVIL_CHECK(closed, path, ":", line.number, ":", column,
                  ": unterminated quoted field (quoted fields cannot span lines)");
      while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
      ANVIL_CHECK(rest.empty() || rest.front() == delim, path, ":", line.number, ":", column,
                  ": unexpected text after the closing quote");
    } else {
      const size_t end = rest.find(delim);
      std::string_view text = rest.substr(0, end);
      while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
      field.assign(text);
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
    }
    fields.push_back(std::move(field));
    if (rest.empty()) return fields;
    rest.remove_prefix(1);  // the delimiter
  }
}

// from_chars rejects a leading '+', which CSV writers do emit.
std::string_view StripPlus(std::string_view s) {
  if (s.size() > 1 && s.front() == '+' && s[1] != '-') s.remove_prefix(1);
  return s;
}

std::optional<double> ParseDouble(std::string_view s) {
  s = StripPlus(s);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  s = StripPlus(s);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

char DefaultDelimiter(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.ends_with(".gz")) name.resize(name.size() - 3);
  return name.ends_with(".tsv") || name.ends_with(".tab") ? '\t' : ',';
}

// kAuto: a header when a field of the first row is not a number although the second row has
// a number in that column.
bool DetectHeader(const std::vector<std::string>& first, const std::vector<std::string>& second) {
  for (size_t c = 0; c < first.size() && c < second.size(); ++c) {
    if (!ParseDouble(first[c]) && ParseDouble(second[c])) return true;
  }
  return false;
}

// Where the target is among the columns, from the first line (and the second, for kAuto's
// header detection): what CsvDataset and read_csv_columns share.
struct ColumnLayout {
  bool header = false;
  int64_t num_columns = 0;
  int64_t label = 0;
  std::vector<std::string> feature_names;
  std::string target_name;
};

ColumnLayout LayColumns(const std::vector<std::string>& first, const std::vector<Line>& lines, char delim,
                        const CsvOptions& options, const std::string& path) {
  ColumnLayout out;
  const bool label_by_name = std::holds_alternative<std::string>(options.label_column);
  out.header = options.header == CsvOptions::Header::kYes;
  if (options.header == CsvOptions::Header::kAuto) {
    out.header = label_by_name || (lines.size() > 1 && DetectHeader(first, SplitFields(lines[1], delim, path)));
  }
  ANVIL_CHECK(!label_by_name || out.header, path, ": label_column '", std::get<std::string>(options.label_column),
              "' is a column name, but the file is read without a header");

  out.num_columns = static_cast<int64_t>(first.size());
  ANVIL_CHECK(out.num_columns >= 2, path, ":1: expected at least 2 fields (features and a target), got ",
              out.num_columns);
  if (label_by_name) {
    const std::string& want = std::get<std::string>(options.label_column);
    const auto it = std::find(first.begin(), first.end(), want);
    if (it == first.end()) {
      std::string names;
      for (const std::string& f : first) names += (names.empty() ? "'" : ", '") + f + "'";
      ANVIL_CHECK(false, path, ":1: label_column: no column named '", want, "' in the header (", names, ")");
    }
    out.label = it - first.begin();
  } else {
    const int64_t index = std::get<int64_t>(options.label_column);
    out.label = index < 0 ? index + out.num_columns : index;
    ANVIL_CHECK(out.label >= 0 && out.label < out.num_columns, path, ": label_column ", index, " is out of range for ",
                out.num_columns, " columns");
  }
  for (int64_t c = 0; c < out.num_columns; ++c) {
    const std::string name = out.header ? first[static_cast<size_t>(c)] : anvil::detail::StrCat("column ", c + 1);
    if (c == out.label) {
      out.target_name = name;
    } else {
      out.feature_names.push_back(name);
    }
  }
  return out;
}

}  // namespace

CsvColumns read_csv_columns(const std::string& path, const CsvOptions& options) {
  // The first megabyte holds the first two lines of any table a model trains on; a first
  // line longer than that is refused here, where the full read would accept it.
  constexpr size_t kPrefix = 1 << 20;
  file_io::GzReader reader(path, options.confine_to);
  std::string prefix(kPrefix, '\0');
  prefix.resize(reader.Read(prefix.data(), kPrefix));
  if (prefix.size() == kPrefix) {  // more follows: whole lines only
    const size_t last = prefix.rfind('\n');
    ANVIL_CHECK(last != std::string::npos, path, ":1: the first line is longer than ", kPrefix, " bytes");
    prefix.resize(last + 1);
  }
  const std::vector<Line> lines = SplitLines(prefix, path);
  ANVIL_CHECK(!lines.empty(), path, ": empty file");
  const char delim = options.delimiter.value_or(DefaultDelimiter(path));
  ColumnLayout layout = LayColumns(SplitFields(lines[0], delim, path), lines, delim, options, path);
  return {layout.header, std::move(layout.feature_names), std::move(layout.target_name)};
}

CsvDataset::CsvDataset(std::string path, CsvOptions options) : path_(std::move(path)) {
  const std::string content = file_io::ReadFile(path_, /*gunzip=*/true, options.confine_to);
  const std::vector<Line> lines = SplitLines(content, path_);
  ANVIL_CHECK(!lines.empty(), path_, ": empty file");
  const char delim = options.delimiter.value_or(DefaultDelimiter(path_));

  const std::vector<std::string> first = SplitFields(lines[0], delim, path_);
  ColumnLayout layout = LayColumns(first, lines, delim, options, path_);
  const bool header = layout.header;
  const int64_t num_columns = layout.num_columns, label = layout.label;
  feature_names_ = std::move(layout.feature_names);
  target_name_ = std::move(layout.target_name);

  // Features parse straight into the tensor; targets wait as text until all are seen,
  // because their kind (integers, numbers, names) is a property of the whole column.
  const size_t first_data = header ? 1 : 0;
  const auto n = static_cast<int64_t>(lines.size() - first_data);
  ANVIL_CHECK(n > 0, path_, ": no data rows after the header");
  const int64_t num_features = num_columns - 1;
  features_ = empty({n, num_features}, kFloat32);
  float* out = features_.data_ptr<float>();
  std::vector<std::string> target_text(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    if ((r & 0xFFF) == 0) interruption_point();  // every 4096 rows
    const Line& line = lines[first_data + static_cast<size_t>(r)];
    std::vector<std::string> fields = (r == 0 && !header) ? first : SplitFields(line, delim, path_);
    ANVIL_CHECK(static_cast<int64_t>(fields.size()) == num_columns, path_, ":", line.number, ": expected ", num_columns,
                " fields, got ", fields.size());
    for (int64_t c = 0; c < num_columns; ++c) {
      std::string& field = fields[static_cast<size_t>(c)];
      ANVIL_CHECK(!field.empty(), path_, ":", line.number, ":", c + 1, ": empty field");
      if (c == label) {
        target_text[static_cast<size_t>(r)] = std::move(field);
        continue;
      }
      const std::optional<double> v = ParseDouble(field);
      ANVIL_CHECK(v.has_value(), path_, ":", line.number, ":", c + 1, ": expected a number, got '", field, "'");
      *out++ = static_cast<float>(*v);
    }
  }

  // The target column's kind.
  auto where = [&](int64_t r) {
    return anvil::detail::StrCat(path_, ":", lines[first_data + static_cast<size_t>(r)].number, ":", label + 1, ": ");
  };
  bool all_int = true, any_name = false;
  for (const std::string& t : target_text) {
    all_int = all_int && ParseInt(t).has_value();
    any_name = any_name || !ParseDouble(t).has_value();
  }
  bool classes = options.target == CsvOptions::Target::kClass;
  if (options.target == CsvOptions::Target::kAuto) classes = all_int || any_name;

  if (!classes) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      const std::string& t = target_text[static_cast<size_t>(r)];
      const std::optional<double> v = ParseDouble(t);
      ANVIL_CHECK(v.has_value(), where(r), "expected a number, got '", t, "'");
      values[static_cast<size_t>(r)] = static_cast<float>(*v);
    }
    targets_ = tensor(values);
    return;
  }
  std::vector<int64_t> labels(static_cast<size_t>(n));
  if (any_name) {
    // Class names: indices in sorted name order, as torchvision's ImageFolder and sklearn's
    // LabelEncoder assign them, so the mapping does not depend on row order.
    std::map<std::string, int64_t> index;
    for (const std::string& t : target_text) index.emplace(t, 0);
    for (auto& [name, k] : index) {
      k = static_cast<int64_t>(classes_.size());
      classes_.push_back(name);
    }
    for (int64_t r = 0; r < n; ++r) labels[static_cast<size_t>(r)] = index[target_text[static_cast<size_t>(r)]];
    num_classes_ = static_cast<int64_t>(classes_.size());
  } else {
    for (int64_t r = 0; r < n; ++r) {
      const std::string& t = target_text[static_cast<size_t>(r)];
      const std::optional<int64_t> v = ParseInt(t);
      ANVIL_CHECK(v.has_value(), where(r), "expected an integer class label, got '", t, "'");
      ANVIL_CHECK(*v >= 0, where(r), "class labels must be >= 0, got '", t,
                  "' (for a numeric target, use CsvOptions::Target::kRegression)");
      labels[static_cast<size_t>(r)] = *v;
      num_classes_ = std::max(num_classes_, *v + 1);
    }
  }
  targets_ = tensor(labels);
}

Example CsvDataset::get(int64_t index) const {
  CheckIndex(index);
  return Example{{Example::kInput, features_.select(0, index)}, {Example::kTarget, targets_.select(0, index)}};
}

std::string CsvDataset::name() const {
  const std::string file = std::filesystem::path(path_).filename().string();
  if (is_classification()) {
    return anvil::detail::StrCat("CsvDataset(", file, ": ", size(), " samples, ", num_features(), " features, ",
                                 num_classes_, " classes)");
  }
  return anvil::detail::StrCat("CsvDataset(", file, ": ", size(), " samples, ", num_features(),
                               " features, regression)");
}

}  // namespace anvil::data
