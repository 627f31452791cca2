// The thin vendor layer over CUPTI: every CUPTI function the shim uses, behind a small class
// that tests replace (Kineto's CuptiActivityApi pattern).
//
// The real implementation loads libcupti with dlopen at run time; the shim never links it, so
// the shim loads on machines without CUDA. Errors are returned as CUptiResult, never thrown.
#pragma once

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace moescope::inject {

class CuptiApi {
 public:
  virtual ~CuptiApi() = default;

  virtual CUptiResult register_callbacks(CUpti_BuffersCallbackRequestFunc requested,
                                         CUpti_BuffersCallbackCompleteFunc completed) = 0;
  virtual CUptiResult register_timestamp_callback(CUpti_TimestampCallbackFunc clock) = 0;
  virtual CUptiResult enable(CUpti_ActivityKind kind) = 0;
  virtual CUptiResult disable(CUpti_ActivityKind kind) = 0;
  // flag: 0 (completed buffers only) or CUPTI_ACTIVITY_FLAG_FLUSH_FORCED.
  virtual CUptiResult flush_all(uint32_t flag) = 0;
  // Iterates a completed buffer: *record = nullptr gives the first record.
  virtual CUptiResult next_record(uint8_t* buffer, size_t valid_bytes, CUpti_Activity** record) = 0;
  // Records dropped since the last call (the global queue).
  virtual CUptiResult dropped_records(size_t* dropped) = 0;
  // "cudaLaunchKernel_v7000" for a runtime/driver callback id, nullptr when unknown.
  virtual const char* callback_name(CUpti_CallbackDomain domain, uint32_t cbid) = 0;
  virtual CUptiResult finalize() = 0;
  // Takes CUPTI's one subscriber slot (CUPTI 13.0: one per process) under `name`
  // (cuptiSubscribe_v2; cuptiSubscribe where the library lacks it). On
  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, *holder names the tool holding it when the
  // library says ("CUPTI for torch", "Nsight Systems", ...), else stays empty.
  virtual CUptiResult subscribe(const char* name, std::string* holder) = 0;
  // Gives the slot back (no-op when not subscribed).
  virtual CUptiResult unsubscribe() = 0;
  // CUPTI_API_VERSION of the loaded library (cuptiGetVersion).
  virtual CUptiResult get_version(uint32_t* version) = 0;
  // Human-readable text for a result ("CUPTI_ERROR_UNKNOWN").
  virtual std::string error_text(CUptiResult result) = 0;
};

// CUPTI loaded with dlopen. load() takes MOESCOPE_CUPTI_PATH when set (and nothing else), else
// an already-loaded libcupti.so.13 (e.g. torch's), then the usual names and CUDA install paths.
class DlopenCuptiApi final : public CuptiApi {
 public:
  // Returns nullptr and sets *error (naming what was tried) when no usable libcupti is found.
  static std::unique_ptr<DlopenCuptiApi> load(std::string* error);
  ~DlopenCuptiApi() override;

  const std::string& library_path() const { return library_path_; }
  // The library's own function `name` (dlsym on its handle: never an interposed one).
  void* symbol(const char* name) const;
  // True when both name the same loaded library (dlopen hands out one handle per library).
  bool same_library_as(const DlopenCuptiApi& other) const { return handle_ == other.handle_; }

  CUptiResult register_callbacks(CUpti_BuffersCallbackRequestFunc requested,
                                 CUpti_BuffersCallbackCompleteFunc completed) override;
  CUptiResult register_timestamp_callback(CUpti_TimestampCallbackFunc clock) override;
  CUptiResult enable(CUpti_ActivityKind kind) override;
  CUptiResult disable(CUpti_ActivityKind kind) override;
  CUptiResult flush_all(uint32_t flag) override;
  CUptiResult next_record(uint8_t* buffer, size_t valid_bytes, CUpti_Activity** record) override;
  CUptiResult dropped_records(size_t* dropped) override;
  const char* callback_name(CUpti_CallbackDomain domain, uint32_t cbid) override;
  CUptiResult finalize() override;
  CUptiResult subscribe(const char* name, std::string* holder) override;
  CUptiResult unsubscribe() override;
  CUptiResult get_version(uint32_t* version) override;
  std::string error_text(CUptiResult result) override;

 private:
  DlopenCuptiApi() = default;
  bool resolve(std::string* error);

  void* handle_ = nullptr;
  std::string library_path_;
  CUptiResult (*register_callbacks_)(CUpti_BuffersCallbackRequestFunc,
                                     CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*register_timestamp_callback_)(CUpti_TimestampCallbackFunc) = nullptr;
  CUptiResult (*enable_)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable_)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all_)(uint32_t) = nullptr;
  CUptiResult (*next_record_)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*dropped_records_)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*callback_name_)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
  CUptiResult (*finalize_)() = nullptr;
  CUptiResult (*subscribe_)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*subscribe_v2_)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                               CUpti_SubscriberParams*) = nullptr;  // CUPTI 13.0+, optional
  CUptiResult (*unsubscribe_)(CUpti_SubscriberHandle) = nullptr;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  CUptiResult (*get_version_)(uint32_t*) = nullptr;
  CUptiResult (*result_string_)(CUptiResult, const char**) = nullptr;
};

// True when the CUDA driver library can be loaded (`library`, default "libcuda.so.1").
// Without it CUPTI cannot enable anything (cuptiActivityEnable returns CUPTI_ERROR_UNKNOWN).
bool cuda_driver_loadable(const char* library = "libcuda.so.1");

}  // namespace moescope::inject
