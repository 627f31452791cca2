// CUDA activity capture through CUPTI's activity API.
//
//   start():  cuptiGetVersion must match the compiled CUPTI_API_VERSION (cupti_compatibility.h)
//             cuptiSubscribe_v2 "moescope": CUPTI 13.0 has one subscriber per process; when
//             another tool holds it, start() fails naming it (held_by()) and touches nothing
//             (multi-subscriber mode needs CUPTI 13.2+ headers and library: not built here)
//             timestamp callback = moescope_now_ns (GPU times land on the recorder's clock)
//             buffer callbacks -> CuptiBufferPool (4 MB buffers, 128 MB cap)
//             enable CONCURRENT_KERNEL (required) + MEMCPY, MEMSET, MEMORY2, SYNCHRONIZATION,
//             RUNTIME, DRIVER, CONTEXT (each optional: a failure is warned and skipped)
//             flush thread: cuptiActivityFlushAll(0) every flush_interval_ms
//   CUPTI:    buffer completed -> layout check -> CuptiRecordTranslator -> recorder;
//             dropped count -> trace
//   stop():   forced flush, disable every kind, unsubscribe; cuptiFinalize only when asked for
//             (MOESCOPE_CUPTI_FINALIZE=1), never at process exit (stop_at_exit)
//
// Why no cuptiFinalize by default: it races with any other thread inside a CUDA or CUPTI call
// (Kineto saw SIGSEGVs in cuptiActivityFlushAll from exactly that and now finalizes only from a
// CUPTI API exit callback); a recorded program's threads keep calling CUDA while the recording
// stops. Disabling every kind already stops the records; what stays is CUPTI's subscription.
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
  bool finalize_at_stop = false;     // cuptiFinalize at stop() (never in stop_at_exit())
  bool accept_any_version = false;   // skip the version check (the layout check still runs)
  bool keep_all_api_calls = false;   // record cudaGetDevice & co too
  // MOESCOPE_CUPTI_BUFFER_MB, MOESCOPE_CUPTI_POOL_MB, MOESCOPE_FLUSH_MS,
  // MOESCOPE_CUPTI_FINALIZE=1, MOESCOPE_CUPTI_ALL_API=1, MOESCOPE_CUPTI_ANY_VERSION=1.
  static CuptiCaptureOptions from_environment();
};

class CuptiCapture {
 public:
  CuptiCapture(CuptiApi& api, CuptiCaptureOptions options);
  ~CuptiCapture();
  CuptiCapture(const CuptiCapture&) = delete;
  CuptiCapture& operator=(const CuptiCapture&) = delete;

  // Returns false (and sets *error) when another capture is active, the loaded CUPTI's version
  // does not match the compiled one (version_refused() then), or the kernel activity kind
  // cannot be enabled (e.g. CUPTI_ERROR_UNKNOWN without a GPU); CUPTI is then left off.
  bool start(std::string* error);
  // Delivers finished buffers now (forced: also partially filled ones).
  void flush(bool forced);
  // Idempotent. Delivers everything CUPTI still holds, then turns CUPTI off.
  void stop();
  // The same from an exit handler: never cuptiFinalize, whatever the options say (other
  // threads may still be inside CUDA calls that pass through CUPTI).
  void stop_at_exit();
  // In a forked child: the flush thread does not exist there; never touch CUPTI again.
  void abandon_after_fork();

  bool running() const;
  std::vector<CUpti_ActivityKind> enabled_kinds() const;
  CuptiTranslationCounts counts() const;
  uint64_t dropped_records() const;  // reported by CUPTI so far (also in the trace's stats)
  // The last start() failed because the loaded CUPTI's version is not the compiled one.
  bool version_refused() const;
  // The last start() failed because another tool holds CUPTI's one subscriber slot: its name
  // ("CUPTI for torch", "another CUPTI client"), else empty.
  std::string held_by() const;
  // Records not translated because their layout was not the compiled one (then every later
  // record is refused too, and the trace says why once).
  uint64_t refused_records() const;
  const CuptiBufferPool& pool() const { return pool_; }

  // CUPTI's buffer callbacks (reached through the trampolines while this capture is active).
  void buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
  void buffer_completed(uint8_t* buffer, size_t size, size_t valid_bytes);

 private:
  void stop_with(bool finalize);
  bool check_version(std::string* error);
  // Translates one completed buffer unless a record's layout is not the compiled one.
  void translate_buffer(uint8_t* buffer, size_t valid_bytes);
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
  bool layout_refused_ = false;
  uint64_t refused_records_ = 0;

  mutable std::mutex state_mutex_;
  bool running_ = false;
  bool abandoned_ = false;
  bool version_refused_ = false;
  std::string held_by_;
  std::vector<CUpti_ActivityKind> enabled_;

  std::thread flush_thread_;
  std::mutex flush_mutex_;
  std::condition_variable flush_wakeup_;
  bool stop_flush_thread_ = false;
};

}  // namespace moescope::inject
