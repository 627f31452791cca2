#include "moescope/runtime/moe_config.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "cuda_kernel_path.h"

namespace moescope::runtime {

void validate_moe_config(const MoEConfig& config, int64_t ep_size) {
  TORCH_CHECK(config.hidden_size > 0, "MoEConfig.hidden_size must be > 0, got ",
              config.hidden_size);
  TORCH_CHECK(config.ffn_hidden_size > 0, "MoEConfig.ffn_hidden_size must be > 0, got ",
              config.ffn_hidden_size);
  // The router rules are the kernels' (kernels::router_config_error), checked once the fields fit
  // the kernels' int.
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  for (const auto& [name, value] :
       {std::pair{"num_experts", config.num_experts}, std::pair{"top_k", config.top_k},
        std::pair{"num_groups", config.num_groups}, std::pair{"group_top_k", config.group_top_k}}) {
    TORCH_CHECK(value >= -kIntMax && value <= kIntMax, "MoEConfig.", name, " is out of range, got ",
                value);
  }
  const std::string router_error = kernels::router_config_error(kernel_path::router_config(config));
  TORCH_CHECK(router_error.empty(), "MoEConfig.", router_error);
  TORCH_CHECK(ep_size >= 1, "expert-parallel group size must be >= 1, got ", ep_size);
  TORCH_CHECK(config.num_redundant_experts >= 0,
              "MoEConfig.num_redundant_experts must be >= 0, got ", config.num_redundant_experts);
  TORCH_CHECK(num_expert_slots(config) % ep_size == 0, "MoEConfig.num_experts (",
              config.num_experts, ") + num_redundant_experts (", config.num_redundant_experts,
              ") must be divisible by the expert-parallel group size (", ep_size, ")");
  TORCH_CHECK(config.receive_cap_rows >= 0, "MoEConfig.receive_cap_rows must be >= 0, got ",
              config.receive_cap_rows);
  TORCH_CHECK(config.dispatch_buffer_headroom >= 1.0,
              "MoEConfig.dispatch_buffer_headroom must be >= 1, got ",
              config.dispatch_buffer_headroom);
  TORCH_CHECK(std::isfinite(config.routed_scaling_factor) && config.routed_scaling_factor > 0,
              "MoEConfig.routed_scaling_factor must be finite and > 0, got ",
              config.routed_scaling_factor);
  TORCH_CHECK(config.aux_loss_coeff >= 0, "MoEConfig.aux_loss_coeff must be >= 0");
  TORCH_CHECK(config.seq_aux_loss_coeff >= 0, "MoEConfig.seq_aux_loss_coeff must be >= 0");
  TORCH_CHECK(config.z_loss_coeff >= 0, "MoEConfig.z_loss_coeff must be >= 0");
  TORCH_CHECK(config.expert_bias_update_rate >= 0,
              "MoEConfig.expert_bias_update_rate must be >= 0");
  TORCH_CHECK(config.gate_logit_skew.empty() ||
                  static_cast<int64_t>(config.gate_logit_skew.size()) == config.num_experts,
              "MoEConfig.gate_logit_skew must be empty or hold num_experts (", config.num_experts,
              ") values, got ", config.gate_logit_skew.size());
  TORCH_CHECK(std::isfinite(config.capacity_factor), "MoEConfig.capacity_factor must be finite");
  TORCH_CHECK(config.num_shared_experts >= 0, "MoEConfig.num_shared_experts must be >= 0");
  TORCH_CHECK(config.shared_ffn_hidden_size >= 0, "MoEConfig.shared_ffn_hidden_size must be >= 0");
  TORCH_CHECK(config.init_std > 0, "MoEConfig.init_std must be > 0");
}

std::vector<double> make_gate_skew(int64_t num_experts, double strength) {
  TORCH_CHECK(num_experts > 0, "make_gate_skew: num_experts must be > 0");
  std::vector<double> skew(static_cast<size_t>(num_experts), 0.0);
  if (num_experts == 1) return skew;
  for (int64_t e = 0; e < num_experts; ++e) {
    skew[static_cast<size_t>(e)] =
        strength * static_cast<double>(num_experts - 1 - e) / static_cast<double>(num_experts - 1);
  }
  return skew;
}

int64_t expert_capacity(const MoEConfig& config, int64_t num_tokens) {
  if (config.capacity_factor <= 0) return -1;
  const double slots = static_cast<double>(num_tokens) * static_cast<double>(config.top_k) *
                       config.capacity_factor / static_cast<double>(config.num_experts);
  return static_cast<int64_t>(std::ceil(slots));
}

}  // namespace moescope::runtime
