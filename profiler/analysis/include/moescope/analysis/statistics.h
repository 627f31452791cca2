// The statistics every analysis, `moescope plan`, `moescope diff` and every viewer panel use:
// one function per statistic, so a number means the same wherever it is shown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moescope::analysis {

// The q-quantile (q in [0, 1]) of ascending `sorted` values, interpolated linearly between the
// two closest ranks (numpy's default): q = 0.5 of {1, 2, 3, 4} is 2.5. 0 when empty.
double percentile_of_sorted(std::span<const double> sorted, double q);
// The same of unsorted values (sorted here, hence the copy).
double percentile(std::vector<double> values, double q);

// The arithmetic mean, and the population standard deviation (divided by the count); 0 when
// empty.
double mean(std::span<const double> values);
double standard_deviation(std::span<const double> values);

// The middle value; the mean of the two middle values of an even count (for integer times,
// rounded down). 0 when empty.
double median(std::vector<double> values);
int64_t median(std::vector<int64_t> values);

// The median of every value but values[index] (0 when there is no other value).
double median_of_others(std::span<const double> values, size_t index);
// Straggler excess: how much values[index] (a rank's busy time) exceeds the median of the
// others' (negative when it is below). Findings' straggler_rank and the diff's per-rank rows.
double straggler_excess(std::span<const double> values, size_t index);

// Expert-load statistics of one layer in one step, over tokens per expert [num_experts]
// (0 when there are no experts or no tokens): max/mean, min/mean, std/mean (coefficient of
// variation, population std) and exp(entropy of the token shares) (the effective number of
// experts: num_experts when even, 1 when every token goes to one expert).
double max_over_mean(std::span<const double> tokens);
double min_over_mean(std::span<const double> tokens);
double coefficient_of_variation(std::span<const double> tokens);
double effective_count(std::span<const double> tokens);

// A hot expert takes more than kHotShareFactor times an even share (1 / num_experts) of its
// layer's tokens; a dead one takes none. The report judges the mean share over the steps, `top`
// and `metrics` each step's share.
inline constexpr double kHotShareFactor = 2.0;
bool is_hot_share(double share, size_t num_experts);
// The hot experts of one layer in one step over tokens [num_experts], in expert order.
std::vector<size_t> hot_experts(std::span<const double> tokens);
size_t count_dead_experts(std::span<const double> tokens);

// part / whole, 0 when whole is not positive (a share of tokens, of time, ...).
double share(double part, double whole);

// A total over `steps` steps expressed per step (0 steps: the total as one step).
double per_step(double total, int64_t steps);

}  // namespace moescope::analysis
