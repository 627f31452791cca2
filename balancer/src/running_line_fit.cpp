#include "moescope/balancer/running_line_fit.h"

#include <algorithm>
#include <cmath>

namespace moescope::balancer {

void RunningLineFit::add(double x, double y) {
  if (!std::isfinite(x) || !std::isfinite(y)) return;
  sums_[0] += 1;
  sums_[1] += x;
  sums_[2] += y;
  sums_[3] += x * x;
  sums_[4] += x * y;
  sums_[5] += y * y;
}

void RunningLineFit::merge(const Sums& other) {
  for (size_t i = 0; i < kNumSums; ++i) sums_[i] += other[i];
}

LineEstimate RunningLineFit::estimate() const {
  LineEstimate line;
  const double n = sums_[0];
  line.samples = n;
  if (n < 1) return line;
  line.valid = true;
  const double mean_x = sums_[1] / n, mean_y = sums_[2] / n;
  // Centred sums; clamped at 0 against rounding (they are sums of squares).
  const double sxx = std::max(0.0, sums_[3] - n * mean_x * mean_x);
  const double syy = std::max(0.0, sums_[5] - n * mean_y * mean_y);
  const double sxy = sums_[4] - n * mean_x * mean_y;
  // A spread in x below this share of its scale is rounding, not information.
  const double scale = std::max(1.0, std::abs(mean_x));
  if (n >= 2 && sxx > 1e-12 * n * scale * scale) {
    line.has_slope = true;
    line.slope = sxy / sxx;
    line.intercept = mean_y - line.slope * mean_x;
    if (n >= 3) {
      const double residual = std::max(0.0, syy - line.slope * sxy) / (n - 2);
      line.slope_stderr = std::sqrt(residual / sxx);
      line.intercept_stderr = std::sqrt(residual * (1.0 / n + mean_x * mean_x / sxx));
    }
  } else {
    line.intercept = mean_y;
    if (n >= 2) line.intercept_stderr = std::sqrt(syy / (n - 1) / n);
  }
  return line;
}

}  // namespace moescope::balancer
