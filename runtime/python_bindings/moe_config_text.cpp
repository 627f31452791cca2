#include "moe_config_text.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "moescope/runtime/receive_cap.h"

namespace moescope::runtime::python {
namespace {

int64_t parse_int(const std::string& field, const std::string& value) {
  char* end = nullptr;
  const long long parsed = std::strtoll(value.c_str(), &end, 10);
  TORCH_CHECK(!value.empty() && end != nullptr && *end == '\0', "MoEConfig.", field,
              ": not an integer: '", value, "'");
  return parsed;
}

double parse_double(const std::string& field, const std::string& value) {
  char* end = nullptr;
  const double parsed = std::strtod(value.c_str(), &end);
  TORCH_CHECK(!value.empty() && end != nullptr && *end == '\0', "MoEConfig.", field,
              ": not a number: '", value, "'");
  return parsed;
}

bool parse_bool(const std::string& field, const std::string& value) {
  const bool is_true = value == "1" || value == "true" || value == "True";
  const bool is_false = value == "0" || value == "false" || value == "False";
  TORCH_CHECK(is_true || is_false, "MoEConfig.", field, ": not a boolean: '", value, "'");
  return is_true;
}

template <typename Enum>
Enum parse_enum(const std::string& field, const std::string& value,
                const std::map<std::string, Enum>& names) {
  const auto found = names.find(value);
  std::string known;
  for (const auto& entry : names) known += (known.empty() ? "" : ", ") + entry.first;
  TORCH_CHECK(found != names.end(), "MoEConfig.", field, ": unknown value '", value, "' (one of ",
              known, ")");
  return found->second;
}

// Value -> name is the enum's own name function (for values 0..count-1); this is the other way,
// so both read one list of names.
template <typename Enum>
std::map<std::string, Enum> names_of(const char* (*name_of)(Enum), int count) {
  std::map<std::string, Enum> names;
  for (int value = 0; value < count; ++value) {
    names.emplace(name_of(static_cast<Enum>(value)), static_cast<Enum>(value));
  }
  return names;
}

void parse_value(const std::string& field, const std::string& value, int64_t& out) {
  out = parse_int(field, value);
}
void parse_value(const std::string& field, const std::string& value, double& out) {
  out = parse_double(field, value);
}
void parse_value(const std::string& field, const std::string& value, bool& out) {
  out = parse_bool(field, value);
}

std::string format_value(int64_t value) {
  return std::to_string(value);
}
std::string format_value(bool value) {
  return value ? "1" : "0";
}
// 17 significant digits: parse_double gives back the same double.
std::string format_value(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// One field of the text format: how its value is read and written.
struct FieldCoding {
  std::function<void(MoEConfig&, const std::string& field, const std::string& value)> parse;
  std::function<std::string(const MoEConfig&)> format;
};

// A plain field: parsed and written by the field's type (int64_t, double or bool).
template <typename Value>
FieldCoding plain_field(Value MoEConfig::*member) {
  return {[member](MoEConfig& c, const std::string& f, const std::string& v) {
            parse_value(f, v, c.*member);
          },
          [member](const MoEConfig& c) { return format_value(c.*member); }};
}

// An enum field, by name.
template <typename Enum>
FieldCoding enum_field(Enum MoEConfig::*member, std::map<std::string, Enum> names) {
  auto parse = [member, names](MoEConfig& c, const std::string& f, const std::string& v) {
    c.*member = parse_enum<Enum>(f, v, names);
  };
  auto format = [member, names](const MoEConfig& c) {
    for (const auto& [name, value] : names) {
      if (value == c.*member) return name;
    }
    return std::to_string(static_cast<int>(c.*member));  // not reached: every value is named
  };
  return {parse, format};
}

// Comma-separated doubles (gate_logit_skew).
FieldCoding list_field(std::vector<double> MoEConfig::*member) {
  return {[member](MoEConfig& c, const std::string& f, const std::string& v) {
            (c.*member).clear();
            std::stringstream values(v);
            for (std::string item; std::getline(values, item, ',');) {
              (c.*member).push_back(parse_double(f, item));
            }
          },
          [member](const MoEConfig& c) {
            std::string text;
            for (double value : c.*member) text += (text.empty() ? "" : ",") + format_value(value);
            return text;
          }};
}

// Every field of MoEConfig by its name in moe_config.h (and in the Python MoEConfig).
const std::map<std::string, FieldCoding>& fields() {
  static const std::map<std::string, FieldCoding> table = {
      {"hidden_size", plain_field(&MoEConfig::hidden_size)},
      {"ffn_hidden_size", plain_field(&MoEConfig::ffn_hidden_size)},
      {"num_experts", plain_field(&MoEConfig::num_experts)},
      {"top_k", plain_field(&MoEConfig::top_k)},
      {"score_function",
       enum_field(&MoEConfig::score_function,
                  {{"softmax", ScoreFunction::kSoftmax}, {"sigmoid", ScoreFunction::kSigmoid}})},
      {"normalize_top_k_weights", plain_field(&MoEConfig::normalize_top_k_weights)},
      {"routed_scaling_factor", plain_field(&MoEConfig::routed_scaling_factor)},
      {"num_groups", plain_field(&MoEConfig::num_groups)},
      {"group_top_k", plain_field(&MoEConfig::group_top_k)},
      {"nonfinite_policy",
       enum_field(&MoEConfig::nonfinite_policy, {{"error", NonFinitePolicy::kError},
                                                 {"dont_check", NonFinitePolicy::kDontCheck}})},
      {"aux_loss_coeff", plain_field(&MoEConfig::aux_loss_coeff)},
      {"seq_aux_loss_coeff", plain_field(&MoEConfig::seq_aux_loss_coeff)},
      {"z_loss_coeff", plain_field(&MoEConfig::z_loss_coeff)},
      {"enable_expert_bias", plain_field(&MoEConfig::enable_expert_bias)},
      {"expert_bias_update_rate", plain_field(&MoEConfig::expert_bias_update_rate)},
      {"gate_logit_skew", list_field(&MoEConfig::gate_logit_skew)},
      {"force_uniform_routing", plain_field(&MoEConfig::force_uniform_routing)},
      {"capacity_factor", plain_field(&MoEConfig::capacity_factor)},
      {"drop_policy",
       enum_field(&MoEConfig::drop_policy, {{"by_probability", DropPolicy::kByProbability},
                                            {"by_position", DropPolicy::kByPosition}})},
      {"num_redundant_experts", plain_field(&MoEConfig::num_redundant_experts)},
      {"receive_cap_rows", plain_field(&MoEConfig::receive_cap_rows)},
      {"receive_cap_policy",
       enum_field(&MoEConfig::receive_cap_policy,
                  names_of(&receive_cap_policy_name, kNumReceiveCapPolicies))},
      {"use_dispatch_buffer_pool", plain_field(&MoEConfig::use_dispatch_buffer_pool)},
      {"dispatch_buffer_headroom", plain_field(&MoEConfig::dispatch_buffer_headroom)},
      {"num_shared_experts", plain_field(&MoEConfig::num_shared_experts)},
      {"shared_ffn_hidden_size", plain_field(&MoEConfig::shared_ffn_hidden_size)},
      {"use_fused_kernels", plain_field(&MoEConfig::use_fused_kernels)},
      {"recompute_expert_activation", plain_field(&MoEConfig::recompute_expert_activation)},
      {"layer_index", plain_field(&MoEConfig::layer_index)},
      {"init_std", plain_field(&MoEConfig::init_std)},
  };
  return table;
}

}  // namespace

MoEConfig parse_moe_config_text(const std::string& text) {
  MoEConfig config;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const size_t equals = line.find('=');
    TORCH_CHECK(equals != std::string::npos, "MoEConfig text: expected field=value, got '", line,
                "'");
    const std::string field = line.substr(0, equals);
    const auto coding = fields().find(field);
    TORCH_CHECK(coding != fields().end(), "MoEConfig has no field '", field, "'");
    coding->second.parse(config, field, line.substr(equals + 1));
  }
  return config;
}

std::string moe_config_text(const MoEConfig& config) {
  std::string text;
  for (const auto& [name, coding] : fields()) text += name + "=" + coding.format(config) + "\n";
  return text;
}

}  // namespace moescope::runtime::python
