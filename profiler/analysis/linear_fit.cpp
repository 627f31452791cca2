// Least-squares line with coefficient standard errors (definitions in linear_fit.h).
#include "moescope/analysis/linear_fit.h"

#include <algorithm>
#include <cmath>

namespace moescope::analysis {

LinearFit fit_line(std::span<const double> xs, std::span<const double> ys) {
  LinearFit fit;
  const size_t size = std::min(xs.size(), ys.size());
  double n = 0, sum_x = 0, sum_y = 0;
  for (size_t i = 0; i < size; ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) continue;
    n += 1, sum_x += xs[i], sum_y += ys[i];
  }
  fit.samples = size_t(n);
  if (n < 2) {
    fit.problem = "fewer than 2 samples (" + std::to_string(fit.samples) + ")";
    return fit;
  }
  // Centred sums: the raw ones lose every digit when x is in bytes (1e7) and varies by 1e3.
  const double mean_x = sum_x / n, mean_y = sum_y / n;
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < size; ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) continue;
    const double dx = xs[i] - mean_x, dy = ys[i] - mean_y;
    sxx += dx * dx, sxy += dx * dy, syy += dy * dy;
  }
  if (!(sxx > 1e-12 * std::max(1.0, mean_x * mean_x) * n)) {
    fit.problem = "x does not vary over the " + std::to_string(fit.samples) + " samples";
    return fit;
  }
  fit.slope = sxy / sxx;
  fit.intercept = mean_y - fit.slope * mean_x;
  fit.r_squared = syy > 0 ? sxy * sxy / (sxx * syy) : 1.0;
  const double residual = std::max(0.0, syy - fit.slope * sxy);
  const double variance = n > 2 ? residual / (n - 2) : 0.0;
  fit.slope_stderr = std::sqrt(variance / sxx);
  fit.intercept_stderr = std::sqrt(variance * (1.0 / n + mean_x * mean_x / sxx));
  fit.valid = true;
  return fit;
}

}  // namespace moescope::analysis
