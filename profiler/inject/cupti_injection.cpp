#include "cupti_injection.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "cupti_capture.h"
#include "moescope/recorder.h"
#include "moescope/trace/recording_environment.h"
#include "nccl_interpose.h"

namespace moescope::inject {
namespace {

enum class CaptureState { kOff, kNoDriver, kWaitingForCuInit, kOn, kFailed };

struct ProcessCapture {
  std::mutex mutex;
  CaptureState state = CaptureState::kOff;
  std::string detail;  // library path or error
  // Set by gpu_capture_prepare(), consumed by gpu_capture_start(): the decision was made (and
  // written into the trace's metadata) before the recording started.
  bool prepared = false;
  bool enable_at_start = false;  // eager: CUPTI starts in gpu_capture_start()
  bool ever_prepared = false;    // InitializeInjection: did the core decide anything?
  // The driver called InitializeInjection: CUDA is up in this process, so a later recording
  // (after a stop) cannot wait for cuInit, which happens once per process; it starts at once.
  bool cuda_initialized = false;
  // Heap objects never freed: CUPTI threads may call back into them until the process ends.
  // Those of the latest start; a start that loads another libcupti replaces (and leaks) them.
  DlopenCuptiApi* api = nullptr;
  CuptiCapture* capture = nullptr;
};

ProcessCapture& process_capture() {
  static auto* capture = new ProcessCapture();
  return *capture;
}

// Set while this thread holds the process mutex: a CUPTI call made under it that comes back
// into the shim (an interposed cupti* entry point reached from inside libcupti) must not take
// the mutex again.
thread_local bool t_controlling_capture = false;

class ControlLock {
 public:
  explicit ControlLock(ProcessCapture& process) : lock_(process.mutex) {
    t_controlling_capture = true;
  }
  ~ControlLock() { t_controlling_capture = false; }
  ControlLock(const ControlLock&) = delete;
  ControlLock& operator=(const ControlLock&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

const char* state_name(CaptureState state) {
  static const char* const kNames[] = {"off", "no CUDA driver", "waiting for cuInit", "on",
                                       "failed"};  // in CaptureState order
  const auto index = static_cast<size_t>(state);
  return index < sizeof(kNames) / sizeof(kNames[0]) ? kNames[index] : "off";
}

std::string json_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

void record_note(const char* text) {
  moescope_instant(moescope_intern("moescope"), moescope_intern(text));
}

// The last flush at exit, before CUDA and CUPTI tear themselves down.
//
// The shim's own exit handler (shim_session.cpp) is registered by its constructor, before the
// program's main, so it runs after every later one: after the CUDA runtime's teardown and the
// static destructors of libcupti itself (registered when it was loaded, later than the shim).
// Flushing CUPTI from there would call into a torn-down library. This handler is registered
// when CUPTI has started, so it runs before all of those: it delivers CUPTI's last records
// (forced flush), disables the kinds, and stops the NCCL completion poller (its CUDA event
// queries would otherwise race the runtime's teardown), while the recording stays open for the
// program's own exit handlers. It never calls cuptiFinalize (cupti_capture.h says why). The
// session's later stop then finds CUPTI stopped and touches neither library again.
// cudaErrorCudartUnloading: the CUDA runtime's own exit handler has started tearing it down.
constexpr int kCudaErrorCudartUnloading = 4;

// Whether the CUDA runtime the program loaded is still up, asked without loading one: the
// order of this handler against cudart's teardown is only known on a GPU, so the trace says
// what it found (tests/device part "restart" checks it).
std::string cuda_runtime_state_at_exit() {
  void* get_device = dlsym(RTLD_DEFAULT, "cudaGetDevice");
  for (const char* soname : {"libcudart.so.13", "libcudart.so.12"}) {
    if (get_device) break;
    if (void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD))
      get_device = dlsym(handle, "cudaGetDevice");
  }
  if (!get_device) return "no CUDA runtime loaded";
  int device = -1;
  int status = reinterpret_cast<int (*)(int*)>(get_device)(&device);
  if (status == kCudaErrorCudartUnloading) return "after the CUDA runtime began its teardown";
  return "before the CUDA runtime's teardown";
}

void flush_before_cuda_teardown() {
  ProcessCapture& process = process_capture();
  {
    ControlLock lock(process);
    if (process.capture && process.state == CaptureState::kOn) {
      record_note(("gpu capture flushed at exit " + cuda_runtime_state_at_exit()).c_str());
      process.capture->stop_at_exit();
      process.state = CaptureState::kOff;
      process.detail = "stopped at exit";
    }
  }
  if (nccl_capture_shutdown) nccl_capture_shutdown();
}

void register_exit_flush_once() {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(&flush_before_cuda_teardown); });
}

// Loads CUPTI and starts the activity capture. Caller holds the mutex.
void enable_cupti_locked(ProcessCapture& process) {
  if (process.state == CaptureState::kOn) return;
  if (!moescope_recording) return;  // the core did not start a recording: nothing to write to
  // Every start looks for CUPTI again, as a fresh process would: the environment may name
  // another library (MOESCOPE_CUPTI_PATH) than an earlier recording of this process used, or
  // none that loads. The same library keeps its api and capture.
  std::string error;
  std::unique_ptr<DlopenCuptiApi> loaded = DlopenCuptiApi::load(&error);
  if (!loaded) {
    process.state = CaptureState::kFailed;
    process.detail = error;
    std::fprintf(stderr, "moescope: CUDA activity not recorded: %s\n", error.c_str());
    record_note("gpu capture off: libcupti not found");
    return;
  }
  if (!process.api || !process.api->same_library_as(*loaded)) {
    // The previous api and capture (stopped) stay allocated: see ProcessCapture.
    process.api = loaded.release();
    process.capture = nullptr;
  }
  if (!process.capture) {
    process.capture = new CuptiCapture(*process.api, CuptiCaptureOptions::from_environment());
  }
  if (!process.capture->start(&error)) {
    process.state = CaptureState::kFailed;
    process.detail = error;
    std::fprintf(stderr, "moescope: CUDA activity not recorded: %s\n", error.c_str());
    // A version mismatch says which versions, a held CUPTI who holds it (the error is the
    // whole sentence).
    bool whole_sentence = process.capture->version_refused() || !process.capture->held_by().empty();
    record_note(whole_sentence ? ("gpu capture off: " + error).c_str()
                               : "gpu capture off: CUPTI could not be enabled");
    return;
  }
  process.state = CaptureState::kOn;
  process.detail = process.api->library_path();
  register_exit_flush_once();
}

// Decides from the environment and the machine what the capture will do. Caller holds the
// mutex. Touches no recording, so it can run before one starts.
void prepare_locked(ProcessCapture& process) {
  process.prepared = true;
  process.ever_prepared = true;
  process.enable_at_start = false;
  if (process.state == CaptureState::kOn) return;
  const char* mode = std::getenv(trace::environment::kCupti);
  std::string mode_text = mode && *mode ? mode : "auto";
  if (mode_text == "off" || mode_text == "0") {
    process.state = CaptureState::kOff;
    process.detail = std::string(trace::environment::kCupti) + "=off";
    return;
  }
  const char* driver =
      std::getenv(trace::environment::kCudaDriverLibrary);  // tests point it elsewhere
  std::string driver_library = driver && *driver ? driver : "libcuda.so.1";
  if (!cuda_driver_loadable(driver_library.c_str())) {
    process.state = CaptureState::kNoDriver;
    process.detail = driver_library + " not found";
    return;
  }
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  bool lazy = mode_text == "lazy" || (mode_text == "auto" && injection && *injection);
  if (lazy && process.cuda_initialized) {
    process.state = CaptureState::kOff;
    process.detail = "CUDA is up already (cuInit came before this recording): CUPTI starts with it";
    process.enable_at_start = true;
    return;
  }
  if (lazy) {
    process.state = CaptureState::kWaitingForCuInit;
    process.detail = "CUPTI starts when the program initializes CUDA";
    return;
  }
  process.state = CaptureState::kOff;
  process.detail = "CUPTI starts with the recording";
  process.enable_at_start = true;
}

}  // namespace

void gpu_capture_prepare() {
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  prepare_locked(process);
}

void gpu_capture_start() {
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  if (process.state == CaptureState::kOn) return;
  if (!process.prepared) prepare_locked(process);
  process.prepared = false;  // the next start decides again
  if (process.state == CaptureState::kNoDriver) {
    record_note("gpu capture off: no CUDA driver (libcuda.so.1 not found)");
  } else if (process.enable_at_start) {
    process.enable_at_start = false;
    enable_cupti_locked(process);
  }
}

void gpu_capture_stop() {
  ProcessCapture& process = process_capture();
  {
    ControlLock lock(process);
    if (process.capture && process.state == CaptureState::kOn) {
      process.capture->stop();
      process.state = CaptureState::kOff;
      process.detail = "stopped";
    } else if (process.state == CaptureState::kWaitingForCuInit) {
      process.state = CaptureState::kOff;
    }
  }
  if (nccl_capture_shutdown) nccl_capture_shutdown();
}

void gpu_capture_yield(const std::string& client) {
  if (t_controlling_capture) return;  // our own CUPTI call, come back through libcupti
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  if (!process.capture || process.state != CaptureState::kOn) return;
  // Everything CUPTI holds for us is delivered to us now (forced flush), before the other
  // client registers its callbacks, which replace ours for the whole process.
  process.capture->stop_at_exit();
  process.state = CaptureState::kOff;
  process.detail = "yielded to " + client;
  record_note(("gpu capture yielded to the program's own CUPTI client (" + client +
               "): GPU activity from here on is not recorded; NVTX and NCCL still are")
                  .c_str());
}

void* gpu_capture_real_cupti_function(const char* name) {
  ProcessCapture& process = process_capture();
  if (t_controlling_capture) return process.api ? process.api->symbol(name) : nullptr;
  ControlLock lock(process);
  return process.api ? process.api->symbol(name) : nullptr;
}

void gpu_capture_after_fork_in_child() {
  ProcessCapture& process = process_capture();
  // The parent may have held the mutex while forking: start over with a fresh one.
  new (&process.mutex) std::mutex();
  if (process.capture) process.capture->abandon_after_fork();
  process.state = CaptureState::kOff;
  process.detail = "forked child";
  process.prepared = process.enable_at_start = false;
  if (nccl_capture_after_fork_in_child) nccl_capture_after_fork_in_child();
}

std::string gpu_capture_metadata_json() {
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  return std::string("{\"cupti\":\"") + state_name(process.state) + "\",\"cupti_detail\":\"" +
         json_escaped(process.detail) + "\"}";
}

void gpu_capture_forget_cuda_init_for_tests() {
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  process.cuda_initialized = false;
}

std::string gpu_capture_state() {
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  return state_name(process.state);
}

}  // namespace moescope::inject

extern "C" int InitializeInjection(void) {
  using namespace moescope::inject;
  ProcessCapture& process = process_capture();
  ControlLock lock(process);
  process.cuda_initialized = true;
  // Also when the core never called gpu_capture_start (state still off, nothing decided).
  bool undecided = !process.ever_prepared;
  const char* mode = std::getenv(moescope::trace::environment::kCupti);
  const char* cuda =
      std::getenv(moescope::trace::environment::kCuda);  // the shim's switch (record --no-cuda)
  bool disabled = (mode && (std::strcmp(mode, "off") == 0 || std::strcmp(mode, "0") == 0)) ||
                  (cuda && std::strcmp(cuda, "0") == 0);
  if (process.state == CaptureState::kWaitingForCuInit || (undecided && !disabled)) {
    enable_cupti_locked(process);
  }
  return 1;  // keep the library loaded; returning 0 would only make the driver complain
}
