// How every GPU check of tests/device stops on a machine without a GPU: one line
// "<program>: no CUDA device (<why>)" and exit code kNoCudaDeviceExitCode. tests/device/run.sh
// reports such a part as "no-gpu" (a failure on the GPU machine, the expected end of a dry run
// here), and the `device-build` tests expect exactly this (tests/device/CMakeLists.txt).
#pragma once

#include <cstdio>

#ifndef MOESCOPE_NO_CUDA_DEVICE_EXIT_CODE
#define MOESCOPE_NO_CUDA_DEVICE_EXIT_CODE 77
#endif

namespace moescope::device_checks {

inline constexpr int kNoCudaDeviceExitCode = MOESCOPE_NO_CUDA_DEVICE_EXIT_CODE;

// Prints the line and returns the exit code, for `return report_no_cuda_device(...)` in main.
inline int report_no_cuda_device(const char* program, const char* why) {
  std::printf("%s: no CUDA device (%s)\n", program, why);
  std::fflush(stdout);
  return kNoCudaDeviceExitCode;
}

}  // namespace moescope::device_checks
