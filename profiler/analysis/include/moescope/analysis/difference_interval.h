// Is the difference between two runs larger than their own step-to-step noise? Confidence
// intervals for the difference of two means, from per-step samples of each run.
//
// Method (docs/analysis.md, "Comparing two runs"): each run's steps are cut into at most
// `max_batches` batches of consecutive steps (sizes differ by at most one); the standard error of
// the run's mean is sd(batch means) / sqrt(batches). Batch means make the interval honest when
// neighbouring steps are correlated or the run drifts slowly (a plain s / sqrt(n) over steps
// then is too narrow); with at most `max_batches` steps every step is its own batch. The
// difference new - base gets Welch's interval: d +- t(1 - alpha / 2, df) * sqrt(se_base^2 +
// se_new^2), df by Welch-Satterthwaite. It is significant when the interval excludes 0.
//
// Run to run: two runs of the same program differ by more than their step-to-step noise says
// (where the job lands, slow spells longer than a batch). Given the standard deviation of a
// run's mean between repeated runs, measured beforehand (`between_runs_sd`: the same program
// recorded again, docs/analysis.md), each side's variance gains its square: the interval is
// then for "the same two programs run again", not only for these two recordings. The measured
// term is taken as known (it adds no uncertainty of its own to df).
#pragma once

#include <cstddef>
#include <vector>

namespace moescope::analysis {

// Quantile of Student's t distribution with `df` (> 0, may be fractional) degrees of freedom,
// for a probability in (0, 1). Accurate to ~1e-9 (bisection on the CDF computed from the
// regularized incomplete beta function).
double student_t_quantile(double probability, double df);
// P(T <= t) for Student's t with `df` degrees of freedom.
double student_t_cdf(double t, double df);

// Mean of one run's per-step samples and its standard error from batch means.
struct SampleMean {
  size_t steps = 0;
  size_t batches = 0;
  double mean = 0;
  double standard_error = 0;  // 0 when batches < 2 (see `known`)
  bool known() const { return batches >= 2; }
};
SampleMean batch_mean(const std::vector<double>& per_step, size_t max_batches = 10);

struct DifferenceInterval {
  double difference = 0;  // new mean - base mean
  double low = 0, high = 0;
  double degrees_of_freedom = 0;
  bool known = false;        // both runs had >= 2 batches
  bool significant = false;  // known and the interval excludes 0
};
// Two-sided interval at confidence 1 - alpha. When neither run varies at all (both standard
// errors 0, no run-to-run term) the interval is the point difference: significant when the
// means differ.
DifferenceInterval difference_interval(const SampleMean& base, const SampleMean& next, double alpha,
                                       double between_runs_sd = 0.0);

// The run-to-run standard deviation from recordings of one program: `groups` of repeated
// recordings (each group one program: same build, options and seed; each SampleMean one
// recording's mean step time with its standard error). The run means vary within their group by
// sigma_run^2 + the runs' own se^2, so
//   sigma_run^2 = pooled variance of the run means within the groups - mean(se^2),
// with sum(runs - 1) degrees of freedom (0 when no group has two recordings). Two recordings a
// group: (mean(d^2) - mean(se_a^2 + se_b^2)) / 2 over the pairs' differences d.
struct RunToRunEstimate {
  size_t runs = 0;
  size_t degrees_of_freedom = 0;
  double between_variance = 0;  // pooled variance of the run means within their group (ms^2)
  double within_variance = 0;   // mean of the runs' squared standard errors (ms^2)
  double sigma = 0;             // sqrt(max(0, between - within)): `diff --run-to-run`
};
RunToRunEstimate estimate_run_to_run(const std::vector<std::vector<SampleMean>>& groups);

}  // namespace moescope::analysis
