// CPU reference of the fused router (forward and backward). Mirrors router.cu step by step.
#include <cmath>
#include <limits>
#include <vector>

#include "argument_checks.h"
#include "moescope/kernels/cpu_reference.h"

namespace moescope::kernels::reference {
namespace {

// Candidate order used by every top-k here and in router.cu: higher value first, ties to the
// lower index. NaN (used to mark experts already taken) is never better than anything.
bool is_better(float value, int index, float best_value, int best_index) {
  return value > best_value || (value == best_value && index < best_index);
}

int argmax_candidate(const std::vector<float>& values, int begin, int end) {
  float best_value = -std::numeric_limits<float>::infinity();
  int best_index = std::numeric_limits<int>::max();
  for (int i = begin; i < end; ++i) {
    if (is_better(values[i], i, best_value, best_index)) {
      best_value = values[i];
      best_index = i;
    }
  }
  return best_index;
}

void compute_scores(const float* logits_row, const RouterConfig& config, float* scores_row) {
  const int num_experts = config.num_experts;
  if (config.score_function == ScoreFunction::kSigmoid) {
    for (int e = 0; e < num_experts; ++e) scores_row[e] = 1.0f / (1.0f + std::exp(-logits_row[e]));
    return;
  }
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int e = 0; e < num_experts; ++e) max_logit = std::fmax(max_logit, logits_row[e]);
  float sum = 0.0f;
  for (int e = 0; e < num_experts; ++e) sum += std::exp(logits_row[e] - max_logit);
  for (int e = 0; e < num_experts; ++e) scores_row[e] = std::exp(logits_row[e] - max_logit) / sum;
}

// Sets the selection score of every expert outside the group_top_k best groups to -inf.
void apply_group_limit(const RouterConfig& config, std::vector<float>& selection) {
  const int experts_per_group = config.num_experts / config.num_groups;
  std::vector<float> group_scores(config.num_groups);
  for (int g = 0; g < config.num_groups; ++g) {
    const int begin = g * experts_per_group;
    const int end = begin + experts_per_group;
    const int first = argmax_candidate(selection, begin, end);
    float group_score = selection[first];
    if (experts_per_group > 1) {
      const float saved = selection[first];
      selection[first] = std::numeric_limits<float>::quiet_NaN();
      group_score += selection[argmax_candidate(selection, begin, end)];
      selection[first] = saved;
    }
    group_scores[g] = group_score;
  }
  std::vector<bool> group_kept(config.num_groups, false);
  for (int round = 0; round < config.group_top_k; ++round) {
    const int g = argmax_candidate(group_scores, 0, config.num_groups);
    group_kept[g] = true;
    group_scores[g] = std::numeric_limits<float>::quiet_NaN();
  }
  for (int e = 0; e < config.num_experts; ++e) {
    if (!group_kept[e / experts_per_group]) selection[e] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

void router_forward(const float* logits, const float* expert_bias, std::int64_t num_tokens,
                    const RouterConfig& config, float* scores, std::int32_t* topk_ids,
                    float* topk_weights, std::int32_t* selections_per_expert) {
  constexpr const char* kOp = "router_forward";
  detail::check_router_arguments(kOp, config, num_tokens,
                                 {{logits, "logits"},
                                  {scores, "scores"},
                                  {topk_ids, "topk_ids"},
                                  {topk_weights, "topk_weights"}});
  const int num_experts = config.num_experts;
  const int top_k = config.top_k;
  if (selections_per_expert != nullptr) {
    for (int e = 0; e < num_experts; ++e) selections_per_expert[e] = 0;
  }
  std::vector<float> selection(num_experts);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    const float* logits_row = logits + t * num_experts;
    float* scores_row = scores + t * num_experts;
    compute_scores(logits_row, config, scores_row);
    for (int e = 0; e < num_experts; ++e) {
      // NaN (from NaN logits) ranks lowest, like -inf: NaN is reserved for "already taken", so
      // k valid, distinct experts are always chosen and the NaN shows up in the weights.
      const float value = scores_row[e] + (expert_bias != nullptr ? expert_bias[e] : 0.0f);
      selection[e] = std::isnan(value) ? -std::numeric_limits<float>::infinity() : value;
    }
    if (config.num_groups > 1) apply_group_limit(config, selection);
    float selected_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int expert = argmax_candidate(selection, 0, num_experts);
      selection[expert] = std::numeric_limits<float>::quiet_NaN();
      topk_ids[t * top_k + j] = expert;
      topk_weights[t * top_k + j] = scores_row[expert];
      selected_sum += scores_row[expert];
      if (selections_per_expert != nullptr) ++selections_per_expert[expert];
    }
    const float denominator = config.normalize_top_k ? selected_sum + kNormalizeEpsilon : 1.0f;
    for (int j = 0; j < top_k; ++j) {
      topk_weights[t * top_k + j] =
          topk_weights[t * top_k + j] / denominator * config.scaling_factor;
    }
  }
}

void router_backward(const float* scores, const std::int32_t* topk_ids,
                     const float* grad_topk_weights, const float* grad_scores,
                     std::int64_t num_tokens, const RouterConfig& config, float* grad_logits) {
  constexpr const char* kOp = "router_backward";
  detail::check_router_arguments(kOp, config, num_tokens,
                                 {{scores, "scores"},
                                  {topk_ids, "topk_ids"},
                                  {grad_topk_weights, "grad_topk_weights"},
                                  {grad_logits, "grad_logits"}});
  const int num_experts = config.num_experts;
  const int top_k = config.top_k;
  std::vector<float> grad_score(num_experts);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    const float* scores_row = scores + t * num_experts;
    const std::int32_t* ids = topk_ids + t * top_k;
    const float* grad_weights = grad_topk_weights + t * top_k;
    for (int e = 0; e < num_experts; ++e) {
      grad_score[e] = grad_scores != nullptr ? grad_scores[t * num_experts + e] : 0.0f;
    }
    for (int j = 0; j < top_k; ++j) {
      if (ids[j] < 0 || ids[j] >= num_experts) {
        detail::fail_argument(kOp, "topk_ids[" + std::to_string(t * top_k + j) +
                                       "]=" + std::to_string(ids[j]) + " is not an expert id");
      }
    }
    // w_j = s * p_j / D with D = sum_l p_l + eps: dL/dp_m = s / D * (g_m - sum_j g_j p_j / D).
    if (config.normalize_top_k) {
      float selected_sum = 0.0f;
      float weighted_grad = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        selected_sum += scores_row[ids[j]];
        weighted_grad += grad_weights[j] * scores_row[ids[j]];
      }
      const float denominator = selected_sum + kNormalizeEpsilon;
      for (int j = 0; j < top_k; ++j) {
        grad_score[ids[j]] +=
            config.scaling_factor / denominator * (grad_weights[j] - weighted_grad / denominator);
      }
    } else {
      for (int j = 0; j < top_k; ++j) grad_score[ids[j]] += config.scaling_factor * grad_weights[j];
    }
    float* grad_row = grad_logits + t * num_experts;
    if (config.score_function == ScoreFunction::kSigmoid) {
      for (int e = 0; e < num_experts; ++e) {
        grad_row[e] = grad_score[e] * scores_row[e] * (1.0f - scores_row[e]);
      }
    } else {
      float dot = 0.0f;
      for (int e = 0; e < num_experts; ++e) dot += grad_score[e] * scores_row[e];
      for (int e = 0; e < num_experts; ++e) grad_row[e] = scores_row[e] * (grad_score[e] - dot);
    }
  }
}

}  // namespace moescope::kernels::reference
