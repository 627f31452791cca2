// Reading plan files back (see plan_inputs.h).
#include "plan_inputs.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace moescope::cli {
namespace {

std::string read_whole(const std::string& path, const char* what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open the " + what);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

nlohmann::json parse_document(const std::string& text, const std::string& path) {
  nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    try {
      const nlohmann::json strict = nlohmann::json::parse(text);  // only for the message
    } catch (const nlohmann::json::exception& error) {
      throw std::runtime_error(path + ": invalid JSON: " + error.what());
    }
  }
  return document;
}

// An integer in [min, max] (integral floats accepted); the message names `what`.
int int_in_range(const nlohmann::json& value, const std::string& what, int min, int max) {
  double number = value.is_number() ? value.get<double>() : NAN;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    const int64_t whole = value.get<int64_t>();
    if (whole >= min && whole <= max) return static_cast<int>(whole);
  } else if (std::isfinite(number) && std::trunc(number) == number && number >= min &&
             number <= max) {
    return static_cast<int>(number);
  }
  throw std::invalid_argument(what + " is " + value.dump() + ", not an integer in [" +
                              std::to_string(min) + ", " + std::to_string(max) + "]");
}

// More replicas than this many slots per logical expert is not a placement (and would make the
// placement's tables absurdly large).
constexpr int kMaxSlotsPerExpert = 64;
constexpr int kMaxCount = 1 << 20;

}  // namespace

analysis::PlacementPrediction prediction_from_plan_text(const std::string& text,
                                                        const std::string& path) {
  const nlohmann::json document = parse_document(text, path);
  if (!document.is_object() || !document.contains("prediction")) {
    throw std::runtime_error(path +
                             ": no \"prediction\" in this plan (write it with `moescope plan "
                             "--json PLAN.json BASE_TRACES...`, planned from the base run's "
                             "traces with --gpus equal to its ranks)");
  }
  try {
    return analysis::prediction_from_json(document["prediction"].dump());
  } catch (const std::invalid_argument& error) {
    throw std::runtime_error(path + ": " + error.what());
  }
}

analysis::PlacementPrediction read_prediction(const std::string& path) {
  return prediction_from_plan_text(read_whole(path, "plan"), path);
}

balancer::ExpertPlacement placement_from_plan_text(const std::string& text, const std::string& path,
                                                   const balancer::ExpertLoads& loads,
                                                   int num_gpus) {
  const nlohmann::json document = parse_document(text, path);
  int file_gpus = 0, file_experts = 0;
  std::vector<int32_t> physical_to_logical;
  size_t num_layers = 0;
  try {
    if (!document.is_object()) throw std::invalid_argument("the document is not a JSON object");
    file_gpus = int_in_range(document.at("num_gpus"), "\"num_gpus\"", 1, kMaxCount);
    file_experts =
        int_in_range(document.at("num_logical_experts"), "\"num_logical_experts\"", 1, kMaxCount);
    const nlohmann::json& layers = document.at("layers");
    if (!layers.is_array()) throw std::invalid_argument("\"layers\" is not an array");
    for (const auto& layer : layers) {
      const nlohmann::json& phy2log = layer.at("phy2log");
      if (!phy2log.is_array() || phy2log.empty() ||
          phy2log.size() > size_t(file_experts) * kMaxSlotsPerExpert) {
        throw std::invalid_argument(
            "layer " + std::to_string(num_layers) + ": \"phy2log\" must be an array of 1 to " +
            std::to_string(size_t(file_experts) * kMaxSlotsPerExpert) + " expert ids");
      }
      for (const auto& expert : phy2log) {
        physical_to_logical.push_back(int_in_range(
            expert, "layer " + std::to_string(num_layers) + ": an expert id", 0, file_experts - 1));
      }
      ++num_layers;
    }
  } catch (const std::exception& error) {  // nlohmann's (missing keys) and ours
    throw std::runtime_error(path + ": not a placement written by `moescope plan --json` (" +
                             error.what() + ")");
  }
  if (file_gpus != num_gpus || file_experts != loads.num_experts ||
      num_layers != static_cast<size_t>(loads.num_layers)) {
    throw std::runtime_error(
        path + ": the current placement has " + std::to_string(num_layers) + " layers x " +
        std::to_string(file_experts) + " experts on " + std::to_string(file_gpus) +
        " GPUs; the loads have " + std::to_string(loads.num_layers) + " x " +
        std::to_string(loads.num_experts) + " and --gpus is " + std::to_string(num_gpus));
  }
  try {
    return balancer::placement_from_physical_to_logical(loads.num_layers, loads.num_experts,
                                                        num_gpus, physical_to_logical);
  } catch (const std::invalid_argument& error) {
    throw std::runtime_error(path + ": " + error.what());
  }
}

balancer::ExpertPlacement read_current_placement(const std::string& path,
                                                 const balancer::ExpertLoads& loads, int num_gpus) {
  return placement_from_plan_text(read_whole(path, "current placement"), path, loads, num_gpus);
}

}  // namespace moescope::cli
