// One function per statistic (statistics.h).
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moescope::analysis {

double percentile_of_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double position = std::clamp(q, 0.0, 1.0) * double(sorted.size() - 1);
  const size_t low = static_cast<size_t>(position);
  const size_t high = std::min(low + 1, sorted.size() - 1);
  return sorted[low] + (sorted[high] - sorted[low]) * (position - double(low));
}

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return percentile_of_sorted(values, q);
}

namespace {
// The q = 0.5 percentile, written as the mean of the two middles so that it is exact.
double middle_of(double low, double high) {
  return 0.5 * (low + high);
}
int64_t middle_of(int64_t low, int64_t high) {
  return low + (high - low) / 2;
}
template <typename Value>
Value median_of(std::vector<Value> values) {
  if (values.empty()) return Value{};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : middle_of(values[n / 2 - 1], values[n / 2]);
}
}  // namespace

double median(std::vector<double> values) {
  return median_of(std::move(values));
}

int64_t median(std::vector<int64_t> values) {
  return median_of(std::move(values));
}

double median_of_others(std::span<const double> values, size_t index) {
  std::vector<double> others;
  others.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != index) others.push_back(values[i]);
  }
  return median(std::move(others));
}

double straggler_excess(std::span<const double> values, size_t index) {
  return index < values.size() ? values[index] - median_of_others(values, index) : 0.0;
}

double mean(std::span<const double> values) {
  return values.empty()
             ? 0.0
             : std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
}

double standard_deviation(std::span<const double> values) {
  if (values.empty()) return 0.0;
  const double centre = mean(values);
  double squares = 0;
  for (double value : values) squares += (value - centre) * (value - centre);
  return std::sqrt(squares / double(values.size()));
}

double max_over_mean(std::span<const double> tokens) {
  const double centre = mean(tokens);
  return centre > 0 ? *std::max_element(tokens.begin(), tokens.end()) / centre : 0.0;
}

double min_over_mean(std::span<const double> tokens) {
  const double centre = mean(tokens);
  return centre > 0 ? *std::min_element(tokens.begin(), tokens.end()) / centre : 0.0;
}

double coefficient_of_variation(std::span<const double> tokens) {
  const double centre = mean(tokens);
  return centre > 0 ? standard_deviation(tokens) / centre : 0.0;
}

double effective_count(std::span<const double> tokens) {
  const double total = std::accumulate(tokens.begin(), tokens.end(), 0.0);
  if (total <= 0) return 0.0;
  double entropy = 0;
  for (double t : tokens) {
    if (t > 0) entropy -= (t / total) * std::log(t / total);
  }
  return std::exp(entropy);
}

bool is_hot_share(double share, size_t num_experts) {
  return num_experts > 0 && share > kHotShareFactor / double(num_experts);
}

std::vector<size_t> hot_experts(std::span<const double> tokens) {
  const double total = std::accumulate(tokens.begin(), tokens.end(), 0.0);
  std::vector<size_t> hot;
  for (size_t e = 0; e < tokens.size(); ++e) {
    if (is_hot_share(share(tokens[e], total), tokens.size())) hot.push_back(e);
  }
  return hot;
}

size_t count_dead_experts(std::span<const double> tokens) {
  return size_t(std::count_if(tokens.begin(), tokens.end(), [](double t) { return t <= 0; }));
}

double share(double part, double whole) {
  return whole > 0 ? part / whole : 0.0;
}

double per_step(double total, int64_t steps) {
  return total / double(std::max<int64_t>(steps, 1));
}

}  // namespace moescope::analysis
