#include "moescope/balancer/expert_loads.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace moescope::balancer {

namespace {

[[noreturn]] void fail(std::string_view source_name, const std::string& message) {
  throw std::runtime_error(std::string(source_name) + ": " + message);
}

void check_load(std::string_view source_name, double value, const std::string& where) {
  if (!std::isfinite(value) || value < 0.0) {
    std::ostringstream text;
    text << "load " << value << " at " << where << " must be finite and non-negative";
    fail(source_name, text.str());
  }
}

// Appends one layer's loads, checking it has as many experts as the layers before it.
void append_layer(ExpertLoads& loads, const std::vector<double>& layer,
                  std::string_view source_name, const std::string& where) {
  if (layer.empty()) fail(source_name, where + " has no experts");
  if (loads.num_layers == 0) {
    loads.num_experts = static_cast<int>(layer.size());
  } else if (static_cast<int>(layer.size()) != loads.num_experts) {
    fail(source_name, where + " has " + std::to_string(layer.size()) + " experts, layer 0 has " +
                          std::to_string(loads.num_experts));
  }
  loads.values.insert(loads.values.end(), layer.begin(), layer.end());
  ++loads.num_layers;
}

std::vector<double> json_layer(const nlohmann::json& row, std::string_view source_name, int layer) {
  std::vector<double> values;
  values.reserve(row.size());
  for (size_t expert = 0; expert < row.size(); ++expert) {
    const std::string where =
        "layer " + std::to_string(layer) + " expert " + std::to_string(expert);
    if (!row[expert].is_number()) {
      fail(source_name, where + " is " + std::string(row[expert].type_name()) + ", not a number");
    }
    const double value = row[expert].get<double>();
    check_load(source_name, value, where);
    values.push_back(value);
  }
  return values;
}

std::string_view trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

bool parse_number(std::string_view field, double& value) {
  if (field.empty()) return false;
  if (field.front() == '+') field.remove_prefix(1);
  // strtod, not std::from_chars: the libc++ of the manylinux wheel's toolchain has no
  // floating-point from_chars. What from_chars would refuse, refused here too: leading space,
  // hexadecimal, out of range. (Nothing here calls setlocale: the decimal point is '.'.)
  if (field.empty() || std::isspace(static_cast<unsigned char>(field.front())) ||
      field.find_first_of("xX") != std::string_view::npos) {
    return false;
  }
  const std::string text(field);
  char* end = nullptr;
  errno = 0;
  const double parsed = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || end != text.c_str() + text.size()) return false;
  value = parsed;
  return true;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    fields.push_back(
        trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  // A trailing comma does not add an expert.
  if (fields.size() > 1 && fields.back().empty()) fields.pop_back();
  return fields;
}

}  // namespace

ExpertLoads parse_expert_loads_json(std::string_view text, std::string_view source_name) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& error) {
    fail(source_name, std::string("invalid JSON: ") + error.what());
  }
  if (document.is_object()) {
    if (!document.contains("loads")) {
      fail(source_name, "a JSON object must hold the loads under the key \"loads\"");
    }
    document = document["loads"];
  }
  if (!document.is_array() || document.empty()) {
    fail(source_name, "expected a non-empty array of layers (each an array of expert loads)");
  }
  ExpertLoads loads;
  if (!document.front().is_array()) {
    // A flat array is a single layer.
    append_layer(loads, json_layer(document, source_name, 0), source_name, "layer 0");
    return loads;
  }
  for (size_t layer = 0; layer < document.size(); ++layer) {
    const std::string where = "layer " + std::to_string(layer);
    if (!document[layer].is_array()) fail(source_name, where + " is not an array of loads");
    append_layer(loads, json_layer(document[layer], source_name, static_cast<int>(layer)),
                 source_name, where);
  }
  return loads;
}

ExpertLoads parse_expert_loads_csv(std::string_view text, std::string_view source_name) {
  ExpertLoads loads;
  bool seen_row = false;
  size_t line_number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t newline = text.find('\n', start);
    const std::string_view line =
        trim(text.substr(start, newline == std::string_view::npos ? newline : newline - start));
    start = newline == std::string_view::npos ? text.size() + 1 : newline + 1;
    ++line_number;
    if (line.empty() || line.front() == '#') continue;

    const std::vector<std::string_view> fields = split_fields(line);
    std::vector<double> layer(fields.size());
    bool any_number = false;
    for (size_t column = 0; column < fields.size(); ++column) {
      any_number = parse_number(fields[column], layer[column]) || any_number;
    }
    const bool is_header = !seen_row && !any_number;
    seen_row = true;
    if (is_header) continue;
    for (size_t column = 0; column < fields.size(); ++column) {
      const std::string where =
          "line " + std::to_string(line_number) + " column " + std::to_string(column + 1);
      if (!parse_number(fields[column], layer[column])) {
        fail(source_name, where + ": '" + std::string(fields[column]) + "' is not a number");
      }
      check_load(source_name, layer[column], where);
    }
    append_layer(loads, layer, source_name, "line " + std::to_string(line_number));
  }
  if (loads.num_layers == 0) fail(source_name, "no rows of loads found");
  return loads;
}

ExpertLoads read_expert_loads_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open the loads file");
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) throw std::runtime_error(path + ": error while reading the loads file");
  const std::string text = contents.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw std::runtime_error(path + ": the loads file is empty");
  if (text[first] == '[' || text[first] == '{') return parse_expert_loads_json(text, path);
  return parse_expert_loads_csv(text, path);
}

}  // namespace moescope::balancer
