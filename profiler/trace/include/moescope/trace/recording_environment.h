// The environment variables a recording is configured by: `moescope record` writes them, the
// recorder, the shim and the Python capture read them, and a user who preloads the shim by
// hand sets them. Each name is spelled here once in C++; docs/capture.md ("Environment") lists
// every one of them (tests/profiler/record_kind_table_test.cpp), and those "Python" reads are
// the ones the Python package reads (tests/python/test_recorder_abi.py).
#pragma once

namespace moescope::trace::environment {

// X(constant, name, who reads it: what it holds)
#define MOESCOPE_RECORDING_ENVIRONMENT(X)                                                          \
  X(kOutput, "MOESCOPE_OUTPUT", "shim: the trace path pattern; unset, the shim records nothing")   \
  X(kFork, "MOESCOPE_FORK", "shim: what a forked child does, trace or skip")                       \
  X(kCuda, "MOESCOPE_CUDA", "shim: 0 leaves CUDA alone (no CUPTI)")                                \
  X(kNccl, "MOESCOPE_NCCL", "shim, record: 0 leaves NCCL alone")                                   \
  X(kNvtx, "MOESCOPE_NVTX", "shim: 0 leaves NVTX alone")                                           \
  X(kSession, "MOESCOPE_SESSION", "shim: the run's identity, in each trace's metadata")            \
  X(kRootPid, "MOESCOPE_ROOT_PID", "shim: the pid of the command record started")                  \
  X(kRecordPid, "MOESCOPE_RECORD_PID", "shim: the pid of moescope record, which forwards signals") \
  X(kRanks, "MOESCOPE_RANKS", "shim: the ranks that record (--ranks)")                             \
  X(kRunDir, "MOESCOPE_RUN_DIR", "shim: the run's folder (flight recorder)")                       \
  X(kHangTimeoutS, "MOESCOPE_HANG_TIMEOUT_S", "shim: the hang watchdog's timeout, seconds")        \
  X(kSlowStepFactor, "MOESCOPE_SLOW_STEP_FACTOR", "shim: a step this many times the median fires") \
  X(kTorchCaptureLibrary, "MOESCOPE_TORCH_CAPTURE_LIBRARY", "shim, Python: the torch capture")     \
  X(kCupti, "MOESCOPE_CUPTI", "shim: off skips CUPTI")                                             \
  X(kCuptiPath, "MOESCOPE_CUPTI_PATH", "shim: the libcupti to load")                               \
  X(kCuptiBufferMb, "MOESCOPE_CUPTI_BUFFER_MB", "shim: one CUPTI activity buffer, MiB")            \
  X(kCuptiPoolMb, "MOESCOPE_CUPTI_POOL_MB", "shim: all CUPTI activity buffers, MiB")               \
  X(kCuptiFinalize, "MOESCOPE_CUPTI_FINALIZE", "shim: 1 calls cuptiFinalize at stop")              \
  X(kCuptiAnyVersion, "MOESCOPE_CUPTI_ANY_VERSION", "shim: 1 accepts an untested CUPTI")           \
  X(kCuptiAllApi, "MOESCOPE_CUPTI_ALL_API", "shim: 1 keeps every CUDA API call")                   \
  X(kCudaDriverLibrary, "MOESCOPE_CUDA_DRIVER_LIBRARY", "shim: the CUDA driver to load (tests)")   \
  X(kFlushMs, "MOESCOPE_FLUSH_MS", "recorder: flush interval, ms")                                 \
  X(kBufferMb, "MOESCOPE_BUFFER_MB", "recorder: buffer budget, MiB")                               \
  X(kSteps, "MOESCOPE_STEPS", "recorder: the steps A:B recorded (--steps)")                        \
  X(kDelayS, "MOESCOPE_DELAY_S", "recorder: seconds before recording starts (--delay)")            \
  X(kDurationS, "MOESCOPE_DURATION_S", "recorder: seconds recorded (--duration)")                  \
  X(kMaxSize, "MOESCOPE_MAX_SIZE", "recorder: bytes a trace may reach (--max-size)")               \
  X(kFlight, "MOESCOPE_FLIGHT", "recorder: the flight recorder's window (--flight-recorder)")      \
  X(kFlightMb, "MOESCOPE_FLIGHT_MB", "recorder: the flight recorder's ring, MiB")                  \
  X(kAutocapture, "MOESCOPE_AUTOCAPTURE", "Python: 0 turns the zero-code capture off")             \
  X(kStepMarker, "MOESCOPE_STEP_MARKER", "Python: the step marker (--step-marker)")                \
  X(kModuleDepth, "MOESCOPE_MODULE_DEPTH", "Python: module spans' depth (--module-depth)")         \
  X(kTorchOps, "MOESCOPE_TORCH_OPS", "Python: 1 records torch ops (--torch-ops)")                  \
  X(kMetrics, "MOESCOPE_METRICS", "Python: where MoE metrics go (--metrics)")                      \
  X(kMetricsDetail, "MOESCOPE_METRICS_DETAIL", "Python: 1 adds per-expert shares")                 \
  X(kInjectLibrary, "MOESCOPE_INJECT_LIBRARY", "record: the shim to preload")                      \
  X(kRunsDir, "MOESCOPE_RUNS_DIR", "record: where run folders go")

#define MOESCOPE_DECLARE_VARIABLE(constant, name, meaning) inline constexpr char constant[] = name;
MOESCOPE_RECORDING_ENVIRONMENT(MOESCOPE_DECLARE_VARIABLE)
#undef MOESCOPE_DECLARE_VARIABLE

struct Variable {
  const char* name;
  const char* meaning;
};

#define MOESCOPE_LIST_VARIABLE(constant, name, meaning) Variable{name, meaning},
inline constexpr Variable kVariables[] = {MOESCOPE_RECORDING_ENVIRONMENT(MOESCOPE_LIST_VARIABLE)};
#undef MOESCOPE_LIST_VARIABLE

}  // namespace moescope::trace::environment
