#include "moe_config_text.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

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

using Setter = std::function<void(MoEConfig&, const std::string& field, const std::string&)>;

Setter int_field(int64_t MoEConfig::*member) {
  return [member](MoEConfig& c, const std::string& f, const std::string& v) {
    c.*member = parse_int(f, v);
  };
}
Setter double_field(double MoEConfig::*member) {
  return [member](MoEConfig& c, const std::string& f, const std::string& v) {
    c.*member = parse_double(f, v);
  };
}
Setter bool_field(bool MoEConfig::*member) {
  return [member](MoEConfig& c, const std::string& f, const std::string& v) {
    c.*member = parse_bool(f, v);
  };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"hidden_size", int_field(&MoEConfig::hidden_size)},
      {"ffn_hidden_size", int_field(&MoEConfig::ffn_hidden_size)},
      {"num_experts", int_field(&MoEConfig::num_experts)},
      {"top_k", int_field(&MoEConfig::top_k)},
      {"score_function",
       [](MoEConfig& c, const std::string& f, const std::string& v) {
         c.score_function = parse_enum<ScoreFunction>(
             f, v, {{"softmax", ScoreFunction::kSoftmax}, {"sigmoid", ScoreFunction::kSigmoid}});
       }},
      {"normalize_top_k_weights", bool_field(&MoEConfig::normalize_top_k_weights)},
      {"routed_scaling_factor", double_field(&MoEConfig::routed_scaling_factor)},
      {"num_groups", int_field(&MoEConfig::num_groups)},
      {"group_top_k", int_field(&MoEConfig::group_top_k)},
      {"nonfinite_policy",
       [](MoEConfig& c, const std::string& f, const std::string& v) {
         c.nonfinite_policy = parse_enum<NonFinitePolicy>(
             f, v,
             {{"error", NonFinitePolicy::kError}, {"dont_check", NonFinitePolicy::kDontCheck}});
       }},
      {"aux_loss_coeff", double_field(&MoEConfig::aux_loss_coeff)},
      {"seq_aux_loss_coeff", double_field(&MoEConfig::seq_aux_loss_coeff)},
      {"z_loss_coeff", double_field(&MoEConfig::z_loss_coeff)},
      {"enable_expert_bias", bool_field(&MoEConfig::enable_expert_bias)},
      {"expert_bias_update_rate", double_field(&MoEConfig::expert_bias_update_rate)},
      {"gate_logit_skew",
       [](MoEConfig& c, const std::string& f, const std::string& v) {
         c.gate_logit_skew.clear();
         std::stringstream values(v);
         for (std::string item; std::getline(values, item, ',');) {
           c.gate_logit_skew.push_back(parse_double(f, item));
         }
       }},
      {"force_uniform_routing", bool_field(&MoEConfig::force_uniform_routing)},
      {"capacity_factor", double_field(&MoEConfig::capacity_factor)},
      {"drop_policy",
       [](MoEConfig& c, const std::string& f, const std::string& v) {
         c.drop_policy = parse_enum<DropPolicy>(f, v,
                                                {{"by_probability", DropPolicy::kByProbability},
                                                 {"by_position", DropPolicy::kByPosition}});
       }},
      {"num_redundant_experts", int_field(&MoEConfig::num_redundant_experts)},
      {"receive_cap_rows", int_field(&MoEConfig::receive_cap_rows)},
      {"receive_cap_policy",
       [](MoEConfig& c, const std::string& f, const std::string& v) {
         c.receive_cap_policy = parse_enum<ReceiveCapPolicy>(
             f, v,
             {{"drop_lowest_probability", ReceiveCapPolicy::kDropLowestProbability},
              {"drop_latest_position", ReceiveCapPolicy::kDropLatestPosition},
              {"fail", ReceiveCapPolicy::kFail}});
       }},
      {"use_dispatch_buffer_pool", bool_field(&MoEConfig::use_dispatch_buffer_pool)},
      {"dispatch_buffer_headroom", double_field(&MoEConfig::dispatch_buffer_headroom)},
      {"num_shared_experts", int_field(&MoEConfig::num_shared_experts)},
      {"shared_ffn_hidden_size", int_field(&MoEConfig::shared_ffn_hidden_size)},
      {"use_fused_kernels", bool_field(&MoEConfig::use_fused_kernels)},
      {"recompute_expert_activation", bool_field(&MoEConfig::recompute_expert_activation)},
      {"layer_index", int_field(&MoEConfig::layer_index)},
      {"init_std", double_field(&MoEConfig::init_std)},
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
