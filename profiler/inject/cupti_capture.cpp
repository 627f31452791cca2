#include "cupti_capture.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cupti_compatibility.h"
#include "moescope/recorder.h"
#include "moescope/trace/recording_environment.h"

namespace moescope::inject {
namespace {

std::atomic<CuptiCapture*> g_active_capture{nullptr};

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  CuptiCapture* capture = g_active_capture.load(std::memory_order_acquire);
  if (!capture) {
    *buffer = nullptr;
    *size = 0;
    *max_records = 0;
    return;
  }
  capture->buffer_requested(buffer, size, max_records);
}

void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t size,
                                  size_t valid_bytes) {
  CuptiCapture* capture = g_active_capture.load(std::memory_order_acquire);
  if (capture) capture->buffer_completed(buffer, size, valid_bytes);
}

uint64_t CUPTIAPI recorder_clock() {
  return moescope_now_ns();
}

// The kind that makes the capture worth having comes first; it alone is required.
constexpr CUpti_ActivityKind kActivityKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_MEMORY2,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_CONTEXT,
};

size_t env_megabytes(const char* name, size_t fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  unsigned long long megabytes = std::strtoull(value, &end, 10);
  if (*end != '\0' || megabytes == 0 || megabytes > (1ull << 20)) {
    std::fprintf(stderr, "moescope: ignoring %s=%s (expected megabytes, 1..1048576)\n", name,
                 value);
    return fallback;
  }
  return static_cast<size_t>(megabytes) << 20;
}

bool env_flag(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  return !(value[0] == '0' || value[0] == 'n' || value[0] == 'N' || value[0] == 'f' ||
           value[0] == 'F');
}

}  // namespace

CuptiCaptureOptions CuptiCaptureOptions::from_environment() {
  CuptiCaptureOptions options;
  options.buffer_bytes = env_megabytes(trace::environment::kCuptiBufferMb, options.buffer_bytes);
  options.max_buffer_pool_bytes =
      env_megabytes(trace::environment::kCuptiPoolMb, options.max_buffer_pool_bytes);
  if (const char* value = std::getenv(trace::environment::kFlushMs); value && *value) {
    long ms = std::strtol(value, nullptr, 10);
    if (ms > 0 && ms <= 60000) options.flush_interval_ms = static_cast<uint32_t>(ms);
  }
  options.finalize_at_stop = env_flag(trace::environment::kCuptiFinalize, false);
  options.accept_any_version = env_flag(trace::environment::kCuptiAnyVersion, false);
  options.keep_all_api_calls = env_flag(trace::environment::kCuptiAllApi, false);
  return options;
}

CuptiCapture::CuptiCapture(CuptiApi& api, CuptiCaptureOptions options)
    : api_(api),
      options_(options),
      pool_(options.buffer_bytes, options.max_buffer_pool_bytes),
      translator_(api, options.keep_all_api_calls) {}

CuptiCapture::~CuptiCapture() {
  stop();
}

bool CuptiCapture::start(std::string* error) {
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  if (running_) return true;
  if (abandoned_) {
    if (error) *error = "CUPTI capture cannot restart in a forked child";
    return false;
  }
  CuptiCapture* expected = nullptr;
  if (!g_active_capture.compare_exchange_strong(expected, this)) {
    if (error) *error = "another CUPTI capture is already active";
    return false;
  }
  bool subscribed = false;
  auto fail = [&](const std::string& message) {
    for (CUpti_ActivityKind kind : enabled_) api_.disable(kind);
    enabled_.clear();
    if (subscribed) api_.unsubscribe();
    g_active_capture.store(nullptr, std::memory_order_release);
    if (error) *error = message;
    return false;
  };
  held_by_.clear();
  // First, before CUPTI is asked to do anything: records of another layout would be misread.
  std::string version_error;
  if (!check_version(&version_error)) return fail(version_error);
  // CUPTI 13.0 serves one subscriber per process, and its activity callbacks are process-wide:
  // when another tool (the program's torch.profiler, Nsight) holds it, moescope stays out of
  // its way instead of taking its buffers.
  std::string holder;
  if (CUptiResult result = api_.subscribe("moescope", &holder); result != CUPTI_SUCCESS) {
    if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      held_by_ = holder.empty() ? "another CUPTI client" : holder;
      return fail("CUPTI is held by " + held_by_ +
                  ": GPU activity not recorded (NVTX and NCCL still are)");
    }
    return fail("cuptiSubscribe failed: " + api_.error_text(result));
  }
  subscribed = true;
  // Before any kind is enabled, so every record uses the recorder's clock.
  if (CUptiResult result = api_.register_timestamp_callback(recorder_clock);
      result != CUPTI_SUCCESS) {
    return fail("cuptiActivityRegisterTimestampCallback failed: " + api_.error_text(result));
  }
  if (CUptiResult result = api_.register_callbacks(on_buffer_requested, on_buffer_completed);
      result != CUPTI_SUCCESS) {
    return fail("cuptiActivityRegisterCallbacks failed: " + api_.error_text(result));
  }
  for (CUpti_ActivityKind kind : kActivityKinds) {
    CUptiResult result = api_.enable(kind);
    if (result == CUPTI_SUCCESS) {
      enabled_.push_back(kind);
    } else if (kind == kActivityKinds[0]) {
      return fail("cuptiActivityEnable(CONCURRENT_KERNEL) failed: " + api_.error_text(result));
    } else {
      warn("cuptiActivityEnable(kind " + std::to_string(static_cast<int>(kind)) +
           ") failed: " + api_.error_text(result) + "; continuing without it");
    }
  }
  running_ = true;
  if (options_.flush_interval_ms > 0) {
    stop_flush_thread_ = false;
    flush_thread_ = std::thread([this] { flush_loop(); });
  }
  return true;
}

void CuptiCapture::flush(bool forced) {
  {
    std::lock_guard<std::mutex> state_lock(state_mutex_);
    if (!running_) return;
  }
  CUptiResult result = api_.flush_all(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  if (result != CUPTI_SUCCESS) warn("cuptiActivityFlushAll failed: " + api_.error_text(result));
  collect_dropped();
}

bool CuptiCapture::check_version(std::string* error) {
  version_refused_ = false;
  uint32_t loaded = 0;
  if (CUptiResult result = api_.get_version(&loaded); result != CUPTI_SUCCESS) {
    *error = "cuptiGetVersion failed: " + api_.error_text(result);
    return false;
  }
  if (options_.accept_any_version || cupti_versions_compatible(loaded, kCompiledCuptiApiVersion)) {
    return true;
  }
  version_refused_ = true;
  *error = cupti_version_refusal(loaded, kCompiledCuptiApiVersion);
  return false;
}

void CuptiCapture::stop() {
  stop_with(options_.finalize_at_stop);
}

void CuptiCapture::stop_at_exit() {
  stop_with(false);
}

void CuptiCapture::stop_with(bool finalize) {
  std::thread flush_thread;
  {
    std::lock_guard<std::mutex> state_lock(state_mutex_);
    if (!running_ || abandoned_) return;
    flush_thread = std::move(flush_thread_);
  }
  if (flush_thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(flush_mutex_);
      stop_flush_thread_ = true;
    }
    flush_wakeup_.notify_all();
    flush_thread.join();
  }
  // Records of work still queued on the GPU are delivered as far as CUPTI has them.
  api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  collect_dropped();
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  for (CUpti_ActivityKind kind : enabled_) api_.disable(kind);
  enabled_.clear();
  api_.unsubscribe();  // the slot is free for the program's own profiler
  if (finalize) {
    if (CUptiResult result = api_.finalize(); result != CUPTI_SUCCESS) {
      warn("cuptiFinalize failed: " + api_.error_text(result));
    }
  }
  running_ = false;
  g_active_capture.store(nullptr, std::memory_order_release);
}

void CuptiCapture::abandon_after_fork() {
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  abandoned_ = true;
  running_ = false;
  // The thread object names a thread of the parent: it must be neither joined nor destroyed
  // while joinable, so it is moved to the heap and deliberately leaked.
  if (flush_thread_.joinable()) new std::thread(std::move(flush_thread_));
  g_active_capture.store(nullptr, std::memory_order_release);
}

bool CuptiCapture::running() const {
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  return running_;
}

std::vector<CUpti_ActivityKind> CuptiCapture::enabled_kinds() const {
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  return enabled_;
}

CuptiTranslationCounts CuptiCapture::counts() const {
  std::lock_guard<std::mutex> lock(translate_mutex_);
  return translator_.counts();
}

uint64_t CuptiCapture::dropped_records() const {
  std::lock_guard<std::mutex> lock(translate_mutex_);
  return dropped_;
}

std::string CuptiCapture::held_by() const {
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  return held_by_;
}

bool CuptiCapture::version_refused() const {
  std::lock_guard<std::mutex> state_lock(state_mutex_);
  return version_refused_;
}

uint64_t CuptiCapture::refused_records() const {
  std::lock_guard<std::mutex> lock(translate_mutex_);
  return refused_records_;
}

void CuptiCapture::buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;  // as many records as fit
  *buffer = pool_.acquire();
  *size = *buffer ? pool_.buffer_bytes() : 0;
  if (!*buffer) {
    std::lock_guard<std::mutex> lock(translate_mutex_);
    if (!warned_pool_full_) {
      warned_pool_full_ = true;
      std::fprintf(stderr,
                   "moescope: CUPTI buffer pool full (%.1f MB): GPU records are dropped and "
                   "counted in the trace (raise MOESCOPE_CUPTI_POOL_MB)\n",
                   static_cast<double>(pool_.max_buffers() * pool_.buffer_bytes()) / (1 << 20));
    }
  }
}

void CuptiCapture::buffer_completed(uint8_t* buffer, size_t, size_t valid_bytes) {
  if (!buffer) return;
  translate_buffer(buffer, valid_bytes);
  pool_.release(buffer);
  collect_dropped();
}

void CuptiCapture::translate_buffer(uint8_t* buffer, size_t valid_bytes) {
  std::lock_guard<std::mutex> lock(translate_mutex_);
  // Each record spans from its start to the next record's (the last: to the end of the valid
  // bytes); one shorter than the compiled struct of its kind has another layout.
  CUpti_Activity* record = nullptr;
  if (valid_bytes == 0 || api_.next_record(buffer, valid_bytes, &record) != CUPTI_SUCCESS) return;
  while (record) {
    CUpti_Activity* next = record;
    // MAX_LIMIT_REACHED at the end, INVALID_KIND if torn: either way `record` is the last one.
    if (api_.next_record(buffer, valid_bytes, &next) != CUPTI_SUCCESS) next = nullptr;
    const uint8_t* end = next ? reinterpret_cast<uint8_t*>(next) : buffer + valid_bytes;
    const size_t extent = static_cast<size_t>(end - reinterpret_cast<uint8_t*>(record));
    if (!layout_refused_) {
      std::string refusal = cupti_record_layout_refusal(record->kind, extent);
      if (!refusal.empty()) {
        layout_refused_ = true;
        warn(refusal);
        moescope_instant(moescope_intern("moescope"),
                         moescope_intern(("gpu capture off: " + refusal).c_str()));
      }
    }
    if (layout_refused_) {
      ++refused_records_;
    } else {
      translator_.translate(*record);
    }
    record = next;
  }
}

void CuptiCapture::flush_loop() {
  std::unique_lock<std::mutex> lock(flush_mutex_);
  while (!stop_flush_thread_) {
    flush_wakeup_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms));
    if (stop_flush_thread_) break;
    lock.unlock();
    api_.flush_all(0);
    collect_dropped();
    lock.lock();
  }
}

void CuptiCapture::collect_dropped() {
  size_t dropped = 0;
  if (api_.dropped_records(&dropped) != CUPTI_SUCCESS || dropped == 0) return;
  moescope_count_dropped(dropped);
  std::lock_guard<std::mutex> lock(translate_mutex_);
  dropped_ += dropped;
}

void CuptiCapture::warn(const std::string& message) {
  std::fprintf(stderr, "moescope: %s\n", message.c_str());
}

}  // namespace moescope::inject
