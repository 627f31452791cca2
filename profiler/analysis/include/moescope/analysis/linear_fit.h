// Ordinary least squares of y = intercept + slope * x, with the standard errors of both
// coefficients (the cost models fit their terms with it and carry the errors into intervals).
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace moescope::analysis {

struct LinearFit {
  bool valid = false;
  std::string problem;  // why not valid
  size_t samples = 0;
  double intercept = 0, slope = 0;
  double intercept_stderr = 0, slope_stderr = 0;  // 0 with 2 samples (no residual left)
  double r_squared = 0;
  double at(double x) const { return intercept + slope * x; }
};

// `xs` and `ys` of the same length. Not valid with fewer than 2 points or when every x is the
// same (the slope is then unknown); non-finite pairs are left out.
LinearFit fit_line(std::span<const double> xs, std::span<const double> ys);

}  // namespace moescope::analysis
