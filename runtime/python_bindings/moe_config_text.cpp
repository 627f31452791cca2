#include "moe_config_text.h"

#include <c10/util/Exception.h>

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

using Setter = std::function<void(MoEConfig&, const std::string& field, const std::string&)>;

// The setter of a plain field: parsed by the field's type (int64_t, double or bool).
template <typename Value>
Setter plain_field(Value MoEConfig::*member) {
  return [member](MoEConfig& c, const std::string& f, const std::string& v) {
    parse_value(f, v, c.*member);
  };
}

// The setter of an enum field, by name.
template <typename Enum>
Setter enum_field(Enum MoEConfig::*member, std::map<std::string, Enum> names) {
  return
      [member, names = std::move(names)](MoEConfig& c, const std::string& f, const std::string& v) {
        c.*member = parse_enum<Enum>(f, v, names);
      };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
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
      {"gate_logit_skew",
       [](MoEConfig& c, const std::string& f, const std::string& v) {
         c.gate_logit_skew.clear();
         std::stringstream values(v);
         for (std::string item; std::getline(values, item, ',');) {
           c.gate_logit_skew.push_back(parse_double(f, item));
         }
       }},
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
    const auto setter = setters().find(field);
    TORCH_CHECK(setter != setters().end(), "MoEConfig has no field '", field, "'");
    setter->second(config, field, line.substr(equals + 1));
  }
  return config;
}

}  // namespace moescope::runtime::python
