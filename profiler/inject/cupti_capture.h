// CUDA activity capture through CUPTI's activity API.
//
//   start():  timestamp callback = moescope_now_ns (GPU times land on the recorder's clock)
//             buffer callbacks -> CuptiBufferPool (4 MB buffers, 128 MB cap)
//             enable CONCURRENT_KERNEL (required) + MEMCPY, MEMSET, MEMORY2, SYNCHRONIZATION,
//             RUNTIME, DRIVER, CONTEXT (each optional: a failure is warned and skipped)
//             flush thread: cuptiActivityFlushAll(0) every flush_interval_ms
//   CUPTI:    buffer completed -> CuptiRecordTranslator -> recorder; dropped count -> trace
//   stop():   forced flush, disable every kind, cuptiFinalize (unless disabled)
//
// CUPTI's callbacks are plain functions, so one capture at a time is active (the trampolines
// forward to it). Nothing here throws or aborts: vendor errors become a returned false plus
// one stderr warning.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cupti_api.h"
#include "cupti_buffer_pool.h"
#include "cupti_record_translator.h"

namespace moescope::inject {

struct CuptiCaptureOptions {
  size_t buffer_bytes = CuptiBufferPool::kDefaultBufferBytes;
  size_t max_buffer_pool_bytes = CuptiBufferPool::kDefaultMaxTotalBytes;
  uint32_t flush_interval_ms = 100;  // 0: no flush thread (tests flush by hand)
  bool finalize_at_stop = true;      // cuptiFinalize: leaves no CUPTI overhead after stop
  bool keep_all_api_calls = false;   // record cudaGetDevice & co too
  // MOESCOPE_CUPTI_BUFFER_MB, MOESCOPE_CUPTI_POOL_MB, MOESCOPE_FLUSH_MS,
  // MOESCOPE_CUPTI_FINALIZE=0, MOESCOPE_CUPTI_ALL_API=1.
  static CuptiCaptureOptions from_environment();
};

class CuptiCapture {
 public:
  CuptiCapture(CuptiApi& api, CuptiCaptureOptions options);
  ~CuptiCapture();
  CuptiCapture(const CuptiCapture&) = delete;
  CuptiCapture& operator=(const CuptiCapture&) = delete;

  // Returns false (and sets *error) when another capture is active or the kernel activity
  // kind cannot be enabled (e.g. CUPTI_ERROR_UNKNOWN without a GPU); CUPTI is then left off.
  bool start(std::string* error);
  // Delivers finished buffers now (forced: also partially filled ones).
  void flush(bool forced);
  // Idempotent. Delivers everything CUPTI still holds, then turns CUPTI off.
  void stop();
  // In a forked child: the flush thread does not exist there; never touch CUPTI again.
  void abandon_after_fork();

  bool running() const;
  std::vector<CUpti_ActivityKind> enabled_kinds() const;
  CuptiTranslationCounts counts() const;
  uint64_t dropped_records() const;  // reported by CUPTI so far (also in the trace's stats)
  const CuptiBufferPool& pool() const { return pool_; }

  // CUPTI's buffer callbacks (reached through the trampolines while this capture is active).
  void buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
  void buffer_completed(uint8_t* buffer, size_t size, size_t valid_bytes);

 private:
  void flush_loop();
  void collect_dropped();
  void warn(const std::string& message);

  CuptiApi& api_;
  CuptiCaptureOptions options_;
  CuptiBufferPool pool_;

  mutable std::mutex translate_mutex_;  // buffers may complete on several CUPTI threads
  CuptiRecordTranslator translator_;
  uint64_t dropped_ = 0;
  bool warned_pool_full_ = false;

  mutable std::mutex state_mutex_;
  bool running_ = false;
  bool abandoned_ = false;
  std::vector<CUpti_ActivityKind> enabled_;

  std::thread flush_thread_;
  std::mutex flush_mutex_;
  std::condition_variable flush_wakeup_;
  bool stop_flush_thread_ = false;
};

}  // namespace moescope::inject
