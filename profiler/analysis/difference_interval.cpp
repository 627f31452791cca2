// Welch intervals over batch means (definitions in difference_interval.h).
#include "moescope/analysis/difference_interval.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moescope::analysis {
namespace {

// Continued fraction of the regularized incomplete beta function I_x(a, b), evaluated with the
// modified Lentz method; converges quickly for x < (a + 1) / (a + b + 2).
double incomplete_beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  constexpr double kEpsilon = 1e-15;
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  d = std::abs(d) < kTiny ? kTiny : d;
  d = 1.0 / d;
  double result = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    // Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)).
    double numerator = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + numerator * d;
    d = std::abs(d) < kTiny ? kTiny : d;
    c = 1.0 + numerator / c;
    c = std::abs(c) < kTiny ? kTiny : c;
    d = 1.0 / d;
    result *= d * c;
    // Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)).
    numerator = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + numerator * d;
    d = std::abs(d) < kTiny ? kTiny : d;
    c = 1.0 + numerator / c;
    c = std::abs(c) < kTiny ? kTiny : c;
    d = 1.0 / d;
    const double change = d * c;
    result *= change;
    if (std::abs(change - 1.0) < kEpsilon) break;
  }
  return result;
}

double regularized_incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  const double front = std::exp(log_front);
  if (x < (a + 1.0) / (a + b + 2.0)) return front * incomplete_beta_fraction(a, b, x) / a;
  return 1.0 - front * incomplete_beta_fraction(b, a, 1.0 - x) / b;
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (!(df > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  // P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
  const double tail = 0.5 * regularized_incomplete_beta(0.5 * df, 0.5, df / (df + t * t));
  return t >= 0.0 ? 1.0 - tail : tail;
}

double student_t_quantile(double probability, double df) {
  if (!(probability > 0.0 && probability < 1.0) || !(df > 0.0)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (probability < 0.5) return -student_t_quantile(1.0 - probability, df);
  double low = 0.0, high = 1.0;
  while (student_t_cdf(high, df) < probability && high < 1e12) high *= 2.0;
  for (int i = 0; i < 200 && high - low > 1e-12 * std::max(1.0, high); ++i) {
    const double middle = 0.5 * (low + high);
    (student_t_cdf(middle, df) < probability ? low : high) = middle;
  }
  return 0.5 * (low + high);
}

SampleMean batch_mean(const std::vector<double>& per_step, size_t max_batches) {
  SampleMean result;
  result.steps = per_step.size();
  if (per_step.empty()) return result;
  double sum = 0;
  for (double value : per_step) sum += value;
  result.mean = sum / double(per_step.size());
  result.batches = std::min(per_step.size(), std::max<size_t>(1, max_batches));
  if (result.batches < 2) return result;
  // Batch b holds steps [b * n / k, (b + 1) * n / k).
  const size_t n = per_step.size(), k = result.batches;
  double sum_squares = 0;
  for (size_t b = 0; b < k; ++b) {
    const size_t first = b * n / k, last = (b + 1) * n / k;
    double batch_sum = 0;
    for (size_t i = first; i < last; ++i) batch_sum += per_step[i];
    const double deviation = batch_sum / double(last - first) - result.mean;
    sum_squares += deviation * deviation;
  }
  result.standard_error = std::sqrt(sum_squares / double(k - 1) / double(k));
  return result;
}

DifferenceInterval difference_interval(const SampleMean& base, const SampleMean& next, double alpha,
                                       double between_runs_sd) {
  DifferenceInterval result;
  result.difference = next.mean - base.mean;
  result.low = result.high = result.difference;
  result.known = base.known() && next.known();
  if (!result.known) return result;
  const double base_variance = base.standard_error * base.standard_error;
  const double next_variance = next.standard_error * next.standard_error;
  const double run_to_run_variance = 2.0 * between_runs_sd * between_runs_sd;  // one run a side
  const double variance = base_variance + next_variance + run_to_run_variance;
  if (variance <= 0.0) {
    result.degrees_of_freedom = double(base.batches + next.batches - 2);
    // Rounding must not make equal deterministic numbers (bytes, counts) differ.
    const double scale = std::max(std::abs(base.mean), std::abs(next.mean));
    result.significant = std::abs(result.difference) > 1e-9 * scale;
    return result;
  }
  // Welch-Satterthwaite; the known run-to-run term has no df of its own (infinite).
  const double estimated = base_variance * base_variance / double(base.batches - 1) +
                           next_variance * next_variance / double(next.batches - 1);
  constexpr double kNormal = 1e9;  // df beyond which t is the normal distribution
  result.degrees_of_freedom =
      estimated > 0.0 ? std::min(kNormal, variance * variance / estimated) : kNormal;
  const double half_width =
      student_t_quantile(1.0 - alpha / 2.0, result.degrees_of_freedom) * std::sqrt(variance);
  result.low = result.difference - half_width;
  result.high = result.difference + half_width;
  result.significant = result.low > 0.0 || result.high < 0.0;
  return result;
}

RunToRunEstimate estimate_run_to_run(const std::vector<std::vector<SampleMean>>& groups) {
  RunToRunEstimate estimate;
  double squares = 0, within = 0;
  for (const std::vector<SampleMean>& group : groups) {
    if (group.size() < 2) continue;  // one recording says nothing about run to run
    double mean = 0;
    for (const SampleMean& run : group) mean += run.mean / double(group.size());
    for (const SampleMean& run : group) {
      squares += (run.mean - mean) * (run.mean - mean);
      within += run.standard_error * run.standard_error;
    }
    estimate.runs += group.size();
    estimate.degrees_of_freedom += group.size() - 1;
  }
  if (estimate.degrees_of_freedom == 0) return estimate;
  estimate.between_variance = squares / double(estimate.degrees_of_freedom);
  estimate.within_variance = within / double(estimate.runs);
  estimate.sigma = std::sqrt(std::max(0.0, estimate.between_variance - estimate.within_variance));
  return estimate;
}

}  // namespace moescope::analysis
