// Compares two routings of the same tokens (e.g. the fused CUDA router against at::topk on the
// ATen path) the way tests/device/kernels_check.cu compares the router kernel with its CPU
// reference: two implementations of the scores differ by an ulp or so, so a near-tie may pick
// another expert. Such a token is accepted and counted only when the candidate's choice is
// itself a valid top-k of the reference scores within `tolerance`; anything else is wrong.
//
// Torch-free, so it is unit-tested on CPU (routing_comparison_test.cpp).
#pragma once

#include <cstdint>

namespace moescope::device_checks {

/// The selection rule both routings followed (moescope::runtime::RouterImpl::select_experts):
/// top_k experts of the selection scores, inside the group_top_k best groups when num_groups > 1
/// (a group's score is the sum of its best two experts, one when a group holds one expert).
struct RoutingRule {
  int num_experts = 0;
  int top_k = 0;
  int num_groups = 1;
  int group_top_k = 1;
};

struct RoutingComparison {
  int64_t num_tokens = 0;
  int64_t identical = 0;     // same experts in the same order
  int64_t near_ties = 0;     // other experts or order, a valid top-k within the tolerance
  int64_t wrong = 0;         // anything else: the check fails
  int64_t first_wrong = -1;  // token index of the first wrong one, -1 when none
};

/// selection_scores [num_tokens, num_experts]: the scores selection saw on the reference side
/// (scores + expert bias), row-major. reference_ids, candidate_ids [num_tokens, top_k].
/// `tolerance` bounds an expert score difference that still counts as a tie (group scores,
/// sums of two, get twice that).
RoutingComparison compare_routing(const float* selection_scores, const int64_t* reference_ids,
                                  const int64_t* candidate_ids, int64_t num_tokens,
                                  const RoutingRule& rule, float tolerance);

}  // namespace moescope::device_checks
