// The rules of a valid RouterConfig, written once (see types.h).
#include <string>

#include "moescope/kernels/types.h"

namespace moescope::kernels {

std::string router_config_error(const RouterConfig& config) {
  using std::to_string;
  if (config.num_experts < 1)
    return "num_experts must be >= 1, got " + to_string(config.num_experts);
  if (config.top_k < 1 || config.top_k > config.num_experts) {
    return "top_k must be in [1, num_experts=" + to_string(config.num_experts) + "], got " +
           to_string(config.top_k);
  }
  if (config.score_function != ScoreFunction::kSoftmax &&
      config.score_function != ScoreFunction::kSigmoid) {
    return "score_function must be softmax or sigmoid";
  }
  if (config.num_groups < 1) return "num_groups must be >= 1, got " + to_string(config.num_groups);
  if (config.num_experts % config.num_groups != 0) {
    return "num_groups (" + to_string(config.num_groups) + ") must divide num_experts (" +
           to_string(config.num_experts) + ")";
  }
  if (config.group_top_k < 1 || config.group_top_k > config.num_groups) {
    return "group_top_k must be in [1, num_groups=" + to_string(config.num_groups) + "], got " +
           to_string(config.group_top_k);
  }
  const int experts_per_group = config.num_experts / config.num_groups;
  if (config.top_k > config.group_top_k * experts_per_group) {
    return "group_top_k (" + to_string(config.group_top_k) + ") groups of " +
           to_string(experts_per_group) + " experts hold fewer than top_k (" +
           to_string(config.top_k) + ") experts";
  }
  return {};
}

}  // namespace moescope::kernels
