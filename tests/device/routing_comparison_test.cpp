// The routing comparison of the device MoE-layer check, on constructed scores: identical
// choices, near-ties (expert and group level) that are accepted and counted, and real
// differences that fail.
#include "routing_comparison.h"

#include <gtest/gtest.h>

#include <vector>

namespace moescope::device_checks {
namespace {

constexpr float kTolerance = 1e-5f;

TEST(RoutingComparison, IdenticalChoicesAreCountedAsIdentical) {
  const std::vector<float> scores = {0.1f, 0.5f, 0.3f, 0.1f,   // token 0
                                     0.4f, 0.1f, 0.2f, 0.3f};  // token 1
  const std::vector<int64_t> ids = {1, 2, 0, 3};
  const RoutingRule rule{4, 2, 1, 1};
  RoutingComparison result =
      compare_routing(scores.data(), ids.data(), ids.data(), 2, rule, kTolerance);
  EXPECT_EQ(result.identical, 2);
  EXPECT_EQ(result.near_ties, 0);
  EXPECT_EQ(result.wrong, 0);
  EXPECT_EQ(result.first_wrong, -1);
}

TEST(RoutingComparison, AnUlpTieMayPickTheOtherExpert) {
  // Experts 2 and 3 tie within an ulp for the second place.
  const std::vector<float> scores = {0.1f, 0.5f, 0.2f, 0.2f + 2e-8f};
  const std::vector<int64_t> reference = {1, 3};
  const std::vector<int64_t> candidate = {1, 2};
  RoutingComparison result = compare_routing(scores.data(), reference.data(), candidate.data(), 1,
                                             RoutingRule{4, 2, 1, 1}, kTolerance);
  EXPECT_EQ(result.near_ties, 1);
  EXPECT_EQ(result.wrong, 0);
}

TEST(RoutingComparison, AClearlyWorseExpertIsWrong) {
  const std::vector<float> scores = {0.1f, 0.5f, 0.2f, 0.3f};
  const std::vector<int64_t> reference = {1, 3};
  const std::vector<int64_t> candidate = {1, 2};  // 0.2 vs 0.3: not a tie
  RoutingComparison result = compare_routing(scores.data(), reference.data(), candidate.data(), 1,
                                             RoutingRule{4, 2, 1, 1}, kTolerance);
  EXPECT_EQ(result.wrong, 1);
  EXPECT_EQ(result.first_wrong, 0);
}

TEST(RoutingComparison, OrderMattersUnlessTheScoresTie) {
  const std::vector<float> scores = {0.5f, 0.5f + 1e-8f, 0.1f, 0.3f};
  const std::vector<int64_t> reference = {1, 0};
  const std::vector<int64_t> swapped_tie = {0, 1};
  EXPECT_EQ(compare_routing(scores.data(), reference.data(), swapped_tie.data(), 1,
                            RoutingRule{4, 2, 1, 1}, kTolerance)
                .near_ties,
            1);
  const std::vector<int64_t> reference3 = {1, 3};
  const std::vector<int64_t> swapped = {3, 1};  // 0.3 before 0.5: not how top-k orders
  EXPECT_EQ(compare_routing(scores.data(), reference3.data(), swapped.data(), 1,
                            RoutingRule{4, 2, 1, 1}, kTolerance)
                .wrong,
            1);
}

TEST(RoutingComparison, DuplicateOrOutOfRangeIdsAreWrong) {
  const std::vector<float> scores = {0.5f, 0.5f, 0.1f, 0.3f};
  const std::vector<int64_t> reference = {0, 1};
  for (std::vector<int64_t> candidate :
       {std::vector<int64_t>{0, 0}, std::vector<int64_t>{0, 4}, std::vector<int64_t>{-1, 0}}) {
    EXPECT_EQ(compare_routing(scores.data(), reference.data(), candidate.data(), 1,
                              RoutingRule{4, 2, 1, 1}, kTolerance)
                  .wrong,
              1);
  }
}

TEST(RoutingComparison, GroupNearTieMaySwapAWholeGroup) {
  // 4 groups of 2 experts, top-2 experts inside the best 1 group. Groups 0 and 2 tie (0.9 vs
  // 0.9 + ulp): the candidate took group 0, the reference group 2; experts differ entirely.
  const std::vector<float> scores = {0.6f, 0.3f, 0.1f, 0.1f, 0.45f + 1e-8f, 0.45f, 0.2f, 0.2f};
  const std::vector<int64_t> reference = {4, 5};
  const std::vector<int64_t> candidate = {0, 1};
  const RoutingRule rule{8, 2, 4, 1};
  RoutingComparison result =
      compare_routing(scores.data(), reference.data(), candidate.data(), 1, rule, kTolerance);
  EXPECT_EQ(result.near_ties, 1);
  EXPECT_EQ(result.wrong, 0);
  // A group that is clearly worse is wrong even if its experts are its best two.
  const std::vector<int64_t> worse_group = {6, 7};
  EXPECT_EQ(
      compare_routing(scores.data(), reference.data(), worse_group.data(), 1, rule, kTolerance)
          .wrong,
      1);
}

TEST(RoutingComparison, InsideTheChosenGroupsTheBestExpertsMustBeTaken) {
  // Groups {0,1} and {2,3}; best group is 0 (0.9), top-1 expert inside it is expert 0.
  const std::vector<float> scores = {0.6f, 0.3f, 0.5f, 0.1f};
  const std::vector<int64_t> reference = {0};
  const std::vector<int64_t> second_best_in_group = {1};
  EXPECT_EQ(compare_routing(scores.data(), reference.data(), second_best_in_group.data(), 1,
                            RoutingRule{4, 1, 2, 1}, kTolerance)
                .wrong,
            1);
}

TEST(RoutingComparison, AnInvalidRuleFailsEveryToken) {
  const std::vector<float> scores = {0.5f, 0.4f, 0.3f};
  const std::vector<int64_t> ids = {0, 1};
  RoutingComparison result = compare_routing(scores.data(), ids.data(), ids.data(), 1,
                                             RoutingRule{3, 2, 2, 1}, kTolerance);  // 3 % 2 != 0
  EXPECT_EQ(result.wrong, 1);
}

}  // namespace
}  // namespace moescope::device_checks
