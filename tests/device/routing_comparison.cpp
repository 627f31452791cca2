#include "routing_comparison.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

namespace moescope::device_checks {
namespace {

constexpr float kLowest = -std::numeric_limits<float>::infinity();

// Score of each group: the sum of its best two experts (one for one-expert groups).
std::vector<float> group_scores(const float* scores, const RoutingRule& rule) {
  const int per_group = rule.num_experts / rule.num_groups;
  std::vector<float> result(rule.num_groups);
  for (int g = 0; g < rule.num_groups; ++g) {
    std::vector<float> members(scores + g * per_group, scores + (g + 1) * per_group);
    const int best = std::min(2, per_group);
    std::partial_sort(members.begin(), members.begin() + best, members.end(),
                      std::greater<float>());
    float sum = 0;
    for (int i = 0; i < best; ++i) sum += members[i];
    result[g] = sum;
  }
  return result;
}

// True when `chosen` (top_k ids, in order) is what a top-k selection of `scores` could return
// if every score moved by up to `tolerance`.
bool is_valid_top_k(const float* scores, const int64_t* chosen, const RoutingRule& rule,
                    float tolerance) {
  const int experts = rule.num_experts;
  std::vector<bool> picked(experts, false);
  for (int j = 0; j < rule.top_k; ++j) {
    const int64_t id = chosen[j];
    if (id < 0 || id >= experts || picked[id]) return false;  // out of range or twice
    picked[id] = true;
    // Descending order, as at::topk returns it.
    if (j > 0 && scores[id] > scores[chosen[j - 1]] + tolerance) return false;
  }
  float weakest_pick = std::numeric_limits<float>::infinity();
  for (int j = 0; j < rule.top_k; ++j) weakest_pick = std::min(weakest_pick, scores[chosen[j]]);

  // Experts the selection could have taken instead: every one, or those of the chosen groups
  // plus the best other groups that fill group_top_k (a group that gave no expert still counts).
  std::vector<bool> allowed(experts, rule.num_groups <= 1);
  if (rule.num_groups > 1) {
    const int per_group = experts / rule.num_groups;
    const std::vector<float> group = group_scores(scores, rule);
    std::vector<bool> group_used(rule.num_groups, false);
    int used = 0;
    for (int j = 0; j < rule.top_k; ++j) {
      const int g = static_cast<int>(chosen[j] / per_group);
      if (!group_used[g]) ++used;
      group_used[g] = true;
    }
    if (used > rule.group_top_k) return false;
    std::vector<float> sorted = group;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth_group = sorted[rule.group_top_k - 1];
    for (int g = 0; g < rule.num_groups; ++g) {
      if (group_used[g] && group[g] < kth_group - 2 * tolerance) return false;
    }
    // Fill with the best unused groups.
    for (int filled = used; filled < rule.group_top_k; ++filled) {
      int best = -1;
      for (int g = 0; g < rule.num_groups; ++g) {
        if (!group_used[g] && (best < 0 || group[g] > group[best])) best = g;
      }
      group_used[best] = true;
    }
    for (int e = 0; e < experts; ++e) allowed[e] = group_used[e / per_group];
  }
  float best_left_out = kLowest;
  for (int e = 0; e < experts; ++e) {
    if (allowed[e] && !picked[e]) best_left_out = std::max(best_left_out, scores[e]);
  }
  return weakest_pick >= best_left_out - tolerance;
}

}  // namespace

RoutingComparison compare_routing(const float* selection_scores, const int64_t* reference_ids,
                                  const int64_t* candidate_ids, int64_t num_tokens,
                                  const RoutingRule& rule, float tolerance) {
  RoutingComparison result;
  result.num_tokens = num_tokens;
  const bool rule_ok = rule.num_experts > 0 && rule.top_k > 0 && rule.top_k <= rule.num_experts &&
                       rule.num_groups >= 1 && rule.num_experts % rule.num_groups == 0 &&
                       rule.group_top_k >= 1 && rule.group_top_k <= rule.num_groups;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t* reference = reference_ids + t * rule.top_k;
    const int64_t* candidate = candidate_ids + t * rule.top_k;
    if (rule_ok && std::equal(reference, reference + rule.top_k, candidate)) {
      ++result.identical;
    } else if (rule_ok && is_valid_top_k(selection_scores + t * rule.num_experts, candidate, rule,
                                         tolerance)) {
      ++result.near_ties;
    } else {
      ++result.wrong;
      if (result.first_wrong < 0) result.first_wrong = t;
    }
  }
  return result;
}

}  // namespace moescope::device_checks
