// A least-squares line y = intercept + slope * x kept as running sums, so that it grows one
// sample at a time and sums from several processes add up to the fit over all their samples
// (the runtime's rebalancer all-reduces the sums, so every rank holds the same fit and takes the
// same decision).
#pragma once

#include <array>
#include <cstddef>

namespace moescope::balancer {

struct LineEstimate {
  bool valid = false;      // at least one sample
  bool has_slope = false;  // at least 2 samples with different x
  double intercept = 0, slope = 0;
  double intercept_stderr = 0, slope_stderr = 0;  // 0 with fewer than 3 samples
  double samples = 0;
  double at(double x) const { return intercept + slope * x; }
};

class RunningLineFit {
 public:
  static constexpr size_t kNumSums = 6;  // n, sum x, sum y, sum xx, sum xy, sum yy
  using Sums = std::array<double, kNumSums>;

  /// Non-finite pairs are left out.
  void add(double x, double y);
  /// Adds another fit's sums (another rank's samples).
  void merge(const Sums& other);
  const Sums& sums() const { return sums_; }
  double samples() const { return sums_[0]; }

  /// The least-squares line. Without a spread in x the slope is unknown: the intercept is then
  /// the mean of y (with the standard error of that mean) and has_slope is false.
  LineEstimate estimate() const;

 private:
  Sums sums_{};
};

}  // namespace moescope::balancer
