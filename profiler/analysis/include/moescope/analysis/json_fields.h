// A struct written as a JSON object of its fields, each under its own name, in the order given:
// the struct's field names are the JSON keys, so no key list is kept beside the struct (report,
// diff, plan and the viewer's layout probe). Works for nlohmann::json and ordered_json alike
// (nlohmann 3.11's NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE writes only nlohmann::json, whose keys
// come out sorted).
//
//   MOESCOPE_JSON_FIELDS(StepCostTerm, name, ms, stderr_ms, basis)
//
// Place it in the struct's namespace (argument-dependent lookup finds to_json there), in the one
// .cpp that writes the struct.
#pragma once

#include <nlohmann/json.hpp>

#define MOESCOPE_JSON_FIELDS(Type, ...)                                      \
  template <class Json>                                                      \
  void to_json(Json& nlohmann_json_j, const Type& nlohmann_json_t) {         \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__)) \
  }
