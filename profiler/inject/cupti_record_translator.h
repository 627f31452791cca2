// Turns CUPTI activity records into recorder events (moescope/recorder.h).
//
//   CONCURRENT_KERNEL (CuptiKernelRecord)   -> moescope_gpu_kernel
//   MEMCPY (CuptiMemcpyRecord)              -> moescope_gpu_copy
//   MEMSET (CuptiMemsetRecord)              -> moescope_gpu_copy (is_memset)
//   MEMORY2 (CuptiMemoryRecord)             -> moescope_memory_event_at
//   SYNCHRONIZATION (CuptiSyncRecord)       -> moescope_gpu_sync
//   RUNTIME / DRIVER (CuptiApiRecord)       -> moescope_api_call (launches, copies, syncs,
//                                              allocations; the rest is skipped)
//   CONTEXT (CuptiContextRecord)            -> remembered: context id -> device
// The structs behind the aliases and the kind -> struct mapping: cupti_record_types.h.
//
// Timestamps are used as delivered: the capture registers moescope_now_ns as CUPTI's timestamp
// callback, so CUPTI's times are already on the recorder's clock. Not thread-safe: the capture
// serializes buffer processing.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "cupti_api.h"
#include "cupti_record_types.h"
#include "moescope/recorder.h"

namespace moescope::inject {

struct CuptiTranslationCounts {
  uint64_t kernels = 0;
  uint64_t copies = 0;
  uint64_t memsets = 0;
  uint64_t memory = 0;
  uint64_t syncs = 0;
  uint64_t api_calls = 0;
  uint64_t api_calls_skipped = 0;  // e.g. cudaGetDevice: no GPU work, not worth a record
  uint64_t other = 0;              // kinds we do not translate
};

class CuptiRecordTranslator {
 public:
  // `api` gives callback names; with keep_all_api_calls every runtime/driver call is recorded.
  explicit CuptiRecordTranslator(CuptiApi& api, bool keep_all_api_calls = false);

  void translate(const CUpti_Activity& record);
  const CuptiTranslationCounts& counts() const { return counts_; }

  // "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" (callback names carry an API version).
  static std::string strip_version_suffix(const char* callback_name);
  // True for calls that launch, copy, set, allocate, free or wait for GPU work.
  static bool is_gpu_work_call(const std::string& name);
  // Readable kernel name: demangled when it is a mangled C++ name, else unchanged.
  static std::string demangle(const char* name);

 private:
  struct ApiName {
    moescope_name_t name = 0;
    bool keep = false;
  };

  // One overload per struct of cupti_record_types.h (`kind` tells RUNTIME from DRIVER).
  void translate_record(const CuptiKernelRecord& kernel, CUpti_ActivityKind kind);
  void translate_record(const CuptiMemcpyRecord& copy, CUpti_ActivityKind kind);
  void translate_record(const CuptiMemsetRecord& memset, CUpti_ActivityKind kind);
  void translate_record(const CuptiMemoryRecord& memory, CUpti_ActivityKind kind);
  void translate_record(const CuptiSyncRecord& sync, CUpti_ActivityKind kind);
  void translate_record(const CuptiApiRecord& call, CUpti_ActivityKind kind);
  void translate_record(const CuptiContextRecord& context, CUpti_ActivityKind kind);
  void translate_kernel(const CuptiKernelRecord& kernel);
  // A CuptiMemcpyRecord or CuptiMemsetRecord, counted in `count`.
  template <typename Record>
  void translate_copy(const Record& copy, uint64_t& count);
  void translate_memory(const CuptiMemoryRecord& memory);
  void translate_sync(const CuptiSyncRecord& sync);
  void translate_api(const CuptiApiRecord& call, CUpti_CallbackDomain domain);
  moescope_name_t kernel_name(const char* mangled);
  const ApiName& api_name(CUpti_CallbackDomain domain, uint32_t cbid);
  uint32_t device_of_context(uint32_t context_id) const;
  void learn_context(uint32_t context_id, uint32_t device_id);

  CuptiApi& api_;
  bool keep_all_api_calls_;
  CuptiTranslationCounts counts_;
  std::unordered_map<std::string, moescope_name_t> kernel_names_;
  std::unordered_map<uint64_t, ApiName> api_names_;  // key: domain << 32 | cbid
  std::unordered_map<uint32_t, uint32_t> context_devices_;
};

// Device reported when a record's context was never seen with a device id.
inline constexpr uint32_t kUnknownDevice = 0xFFFFFFFFu;

}  // namespace moescope::inject
