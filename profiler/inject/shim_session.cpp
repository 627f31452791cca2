// The shim's entry point (library constructor) and its recording session.
#include "shim_session.h"

#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "flight_monitor.h"
#include "moescope/recorder.h"
#include "moescope/trace/recording_environment.h"
#include "nccl_interpose.h"
#include "nvtx_handles.h"
#include "preload_list.h"
#include "recorder.h"
#include "shim_options.h"
#include "shim_signals.h"
#include "shim_trace_path.h"
#include "trace_path.h"

namespace moescope::inject {

// The GPU capture (cupti_injection.h): weak, so the core links without the CUDA/NCCL sources.
__attribute__((weak)) void gpu_capture_prepare();
__attribute__((weak)) std::string gpu_capture_metadata_json();
__attribute__((weak)) void gpu_capture_start();
__attribute__((weak)) void gpu_capture_stop();
__attribute__((weak)) void gpu_capture_after_fork_in_child();

namespace {

struct Session {
  std::mutex mutex;  // start/stop/registration; rebuilt in a forked child
  std::atomic<bool> active{false};
  bool keep_when_empty = false;
  bool gpu_capture_started = false;
  std::string path;
};

Session& session() {
  // Leaked on purpose: exit paths and static destructors of the host use it until the end.
  static Session* instance = new Session;
  return *instance;
}

// What the GPU capture will do in this process, and why not when it will not (no CUDA driver,
// switched off, a forked child): `moescope info` shows it, so a trace without GPU events
// explains itself.
nlohmann::json gpu_capture_metadata(const ShimOptions& options, bool forked_child) {
  if (!options.capture_cuda) {
    return {{"cupti", "off"},
            {"cupti_detail", "CUDA capture switched off (moescope record --no-cuda)"}};
  }
  if (forked_child) {
    return {{"cupti", "off"}, {"cupti_detail", "forked child (CUDA does not survive fork)"}};
  }
  if (!gpu_capture_prepare || !gpu_capture_metadata_json) {
    return {{"cupti", "off"}, {"cupti_detail", "moescope was built without the CUPTI headers"}};
  }
  gpu_capture_prepare();
  nlohmann::json described = nlohmann::json::parse(gpu_capture_metadata_json(), nullptr, false);
  if (described.is_discarded()) return {{"cupti", "unknown"}};
  return described;
}

std::string session_metadata(const ShimOptions& options, bool forked_child, bool primary_path) {
  nlohmann::json capture = {
      {"tool", "moescope record"},
      {"fork_mode", options.fork_mode == ForkMode::kTrace ? "trace" : "skip"},
      {"cuda", options.capture_cuda},
      // The shim variant without the interposer has no NCCL hooks at all.
      {"nccl", options.capture_nccl && nccl_capture_shutdown != nullptr},
      {"nvtx", options.capture_nvtx},
      {"forked_child", forked_child},
      {"pattern", options.output_pattern},
      // false: a name the shim chose (no rank, forked child, taken): removed if left empty.
      {"primary_path", primary_path},
      {"gpu", gpu_capture_metadata(options, forked_child)},
  };
  nlohmann::json metadata = {{"capture", capture}};
  if (!options.session.empty()) metadata["session"] = options.session;
  return metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// While alive, the calling thread blocks SIGINT, SIGTERM and SIGXFSZ, and so do threads it
// creates (the recorder's flush thread, CUPTI's threads):
//  - SIGINT/SIGTERM: the shim's handler waits for the flush thread, which must not be the one
//    stuck in it;
//  - SIGXFSZ: a trace write past RLIMIT_FSIZE must fail with EFBIG (the recorder warns once)
//    instead of killing the program. A SIGXFSZ the header write left pending on this thread is
//    consumed before the mask is restored; the program's own writes keep the default action.
class BackgroundSignalsBlocked {
 public:
  BackgroundSignalsBlocked() {
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &blocked, &previous_);
    sigset_t pending;
    sigpending(&pending);
    xfsz_was_pending_ = sigismember(&pending, SIGXFSZ) == 1;
  }
  ~BackgroundSignalsBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!xfsz_was_pending_ && sigismember(&pending, SIGXFSZ) == 1) {
      sigset_t xfsz;
      sigemptyset(&xfsz);
      sigaddset(&xfsz, SIGXFSZ);
      struct timespec no_wait = {0, 0};
      sigtimedwait(&xfsz, nullptr, &no_wait);
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  sigset_t previous_;
  bool xfsz_was_pending_ = false;
};

void after_fork_in_child() {
  Session& state = session();
  new (&state.mutex) std::mutex;  // the parent's lock holder does not exist here
  forget_signal_watcher_after_fork();
  forget_flight_monitor_after_fork();
  forget_recorded_nvtx_ranges();
  forget_thread_names_after_fork();
  if (!state.active.load()) return;
  state.active = false;
  recorder::Recorder::instance().abandon_after_fork();
  if (state.gpu_capture_started && gpu_capture_after_fork_in_child) {
    gpu_capture_after_fork_in_child();
  }
  state.gpu_capture_started = false;
  if (shim_options().fork_mode == ForkMode::kTrace) start_capture_session(/*forked_child=*/true);
}

// Takes moescope out of this process's environment, so what it runs (exec'd children, Python's
// zero-code capture, CUDA's and NVTX's injection) does not load or use it.
void leave_process_unrecorded() {
  for (const char* name : {trace::environment::kOutput, "NVTX_INJECTION64_PATH",
                           "CUDA_INJECTION64_PATH", trace::environment::kTorchCaptureLibrary}) {
    ::unsetenv(name);
  }
  ::setenv(trace::environment::kAutocapture, "0", 1);
  const char* preload = std::getenv("LD_PRELOAD");
  if (!preload) return;
  std::string kept;
  for (const std::string& entry : preload_entries(preload)) {
    if (entry.find("libmoescope_inject") == std::string::npos) {
      kept += (kept.empty() ? "" : ":") + entry;
    }
  }
  ::setenv("LD_PRELOAD", kept.c_str(), 1);
}

void stop_at_exit() {
  try {
    stop_capture_session();
  } catch (...) {
    std::fprintf(stderr, "moescope: error while closing the trace at exit\n");
  }
}

}  // namespace

bool start_capture_session(bool forked_child) {
  Session& state = session();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.active.load()) return true;
  const ShimOptions& options = shim_options();
  recorder::ProcessIdentity identity = recorder::current_process_identity();
  std::string pattern =
      pattern_for_process(options.output_pattern, identity.rank >= 0, forked_child);
  if (trace_taken_by_session(recorder::expand_trace_path(pattern, identity), options.session,
                             identity.pid)) {
    pattern = pattern_with_pid(pattern);
  }
  {
    BackgroundSignalsBlocked blocked;
    bool primary_path = pattern == options.output_pattern;
    std::string metadata = session_metadata(options, forked_child, primary_path);
    if (moescope_recorder_start(pattern.c_str(), metadata.c_str()) != 0) {
      return false;  // the recorder said why, once
    }
    state.keep_when_empty = primary_path;
    const char* path = moescope_recorder_path();
    state.path = path ? path : "";
    state.active = true;
    // CUDA state does not survive fork(): a forked child records CPU events only.
    if (options.capture_cuda && !forked_child && gpu_capture_start) {
      gpu_capture_start();
      state.gpu_capture_started = true;
    }
    start_signal_watcher();
    start_flight_monitor();
  }
  return true;
}

void stop_capture_session() {
  Session& state = session();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.active.load()) return;
  stop_flight_monitor();  // may still dump (a peer's trigger, SIGINT/SIGTERM)
  state.active = false;
  // Also where the session did not start it (a forked child, --no-cuda): NCCL ops may be
  // pending on a poller there, and stopping what never started does nothing.
  if (gpu_capture_stop) gpu_capture_stop();
  state.gpu_capture_started = false;
  moescope_recorder_stop();
  // Helper processes (a launcher, `uname` run by Python, a compile worker) that recorded
  // nothing leave no file behind, unless the user named the file exactly.
  if (!state.keep_when_empty && !state.path.empty() && !trace_has_events(state.path)) {
    ::unlink(state.path.c_str());
  }
}

uint64_t recording_generation() {
  return recorder::Recorder::instance().generation();
}

}  // namespace moescope::inject

namespace {

// Runs when the shim is loaded (LD_PRELOAD: before the program's own constructors).
__attribute__((constructor)) void moescope_shim_constructor() {
  using namespace moescope::inject;
  try {
    // Setuid/setgid programs are left alone: no file is written with their privileges.
    if (getauxval(AT_SECURE)) return;
    ShimOptions options;
    if (!read_shim_options(options)) return;
    // --ranks: a rank not listed runs as without the shim: nothing installed, nothing recorded,
    // and its children and Python do not pick moescope up either.
    int rank = moescope::recorder::current_process_identity().rank;
    if (!rank_is_selected(options.ranks, rank)) {
      // A process without a rank (the launcher) stays idle but passes moescope on: the ranks it
      // starts decide for themselves.
      if (rank >= 0) {
        leave_process_unrecorded();
      } else {
        install_rank_filter(options);
      }
      return;
    }
    install_signal_trampolines();
    // The recorder's fork handlers first: a fork waits for a drain in progress, and in the
    // child the recorder has abandoned the parent's recording before after_fork_in_child runs.
    moescope::recorder::Recorder::install_fork_handlers();
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    if (!start_capture_session(/*forked_child=*/false)) return;
    std::atexit(&stop_at_exit);
  } catch (...) {
    std::fprintf(stderr, "moescope: cannot start recording; the program runs unrecorded\n");
  }
}

}  // namespace
