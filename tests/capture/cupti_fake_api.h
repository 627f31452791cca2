// A CuptiApi that plays CUPTI for tests: it records what the capture asked for and can deliver
// constructed activity records through the capture's own buffer callbacks, exactly as CUPTI
// would (request a buffer, fill it, hand it back as completed).
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cupti_api.h"
#include "cupti_compatibility.h"
#include "cupti_record_types.h"

namespace moescope::testing {

class FakeCuptiApi final : public inject::CuptiApi {
 public:
  // ---- what the capture did ----
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  CUpti_TimestampCallbackFunc clock = nullptr;
  std::vector<CUpti_ActivityKind> enabled;
  std::vector<CUpti_ActivityKind> disabled;
  std::vector<uint32_t> flush_flags;
  std::mutex flush_mutex;
  int finalize_calls = 0;
  // ---- how CUPTI behaves ----
  std::set<CUpti_ActivityKind> failing_kinds;  // enable() returns CUPTI_ERROR_UNKNOWN for them
  size_t dropped_to_report = 0;                // reported once by dropped_records()
  std::map<uint64_t, std::string> names;       // (domain << 32 | cbid) -> callback name
  uint32_t version = CUPTI_API_VERSION;        // what cuptiGetVersion reports
  // Another tool holds CUPTI's one subscriber slot (subscribe() is refused naming it).
  bool slot_taken = false;
  std::string holder = "CUPTI for torch";
  bool subscribed = false;
  std::string subscriber_name;

  CUptiResult register_callbacks(CUpti_BuffersCallbackRequestFunc request,
                                 CUpti_BuffersCallbackCompleteFunc complete) override {
    requested = request;
    completed = complete;
    return CUPTI_SUCCESS;
  }
  CUptiResult subscribe(const char* name, std::string* holder_out) override {
    if (slot_taken) {
      if (holder_out) *holder_out = holder;
      return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    subscribed = true;
    subscriber_name = name ? name : "";
    return CUPTI_SUCCESS;
  }
  CUptiResult unsubscribe() override {
    subscribed = false;
    return CUPTI_SUCCESS;
  }
  CUptiResult register_timestamp_callback(CUpti_TimestampCallbackFunc function) override {
    clock = function;
    return CUPTI_SUCCESS;
  }
  CUptiResult enable(CUpti_ActivityKind kind) override {
    if (failing_kinds.count(kind)) return CUPTI_ERROR_UNKNOWN;
    enabled.push_back(kind);
    return CUPTI_SUCCESS;
  }
  CUptiResult disable(CUpti_ActivityKind kind) override {
    disabled.push_back(kind);
    return CUPTI_SUCCESS;
  }
  CUptiResult flush_all(uint32_t flag) override {
    std::lock_guard<std::mutex> lock(flush_mutex);
    flush_flags.push_back(flag);
    return CUPTI_SUCCESS;
  }
  // Safe while the capture's flush thread runs.
  size_t flushes_with(uint32_t flag) {
    std::lock_guard<std::mutex> lock(flush_mutex);
    return static_cast<size_t>(std::count(flush_flags.begin(), flush_flags.end(), flag));
  }
  // Steps through the records of the buffer being delivered, at the offsets deliver() packed
  // them (as CUPTI does: each record as long as its struct in that CUPTI's version).
  CUptiResult next_record(uint8_t* buffer, size_t valid_bytes, CUpti_Activity** record) override {
    size_t index = 0;
    if (*record) {
      const size_t offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer);
      index =
          static_cast<size_t>(std::find(record_offsets_.begin(), record_offsets_.end(), offset) -
                              record_offsets_.begin()) +
          1;
    }
    if (index >= record_offsets_.size() || record_offsets_[index] >= valid_bytes) {
      return CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *record = reinterpret_cast<CUpti_Activity*>(buffer + record_offsets_[index]);
    return CUPTI_SUCCESS;
  }
  CUptiResult dropped_records(size_t* dropped) override {
    *dropped = dropped_to_report;
    dropped_to_report = 0;
    return CUPTI_SUCCESS;
  }
  const char* callback_name(CUpti_CallbackDomain domain, uint32_t cbid) override {
    auto found = names.find((static_cast<uint64_t>(domain) << 32) | cbid);
    return found == names.end() ? nullptr : found->second.c_str();
  }
  CUptiResult finalize() override {
    ++finalize_calls;
    return CUPTI_SUCCESS;
  }
  CUptiResult get_version(uint32_t* reported) override {
    *reported = version;
    return CUPTI_SUCCESS;
  }
  std::string error_text(CUptiResult result) override {
    return "FAKE_CUPTI_ERROR_" + std::to_string(static_cast<int>(result));
  }

  // Size of each record kind in a buffer: the compiled struct (CUPTI pads records to 8 bytes).
  static size_t record_size(CUpti_ActivityKind kind) {
    size_t size = inject::compiled_record_size(kind);
    if (size == 0) size = sizeof(CUpti_Activity);
    return (size + 7) / 8 * 8;
  }

  // Plays CUPTI: asks the capture for a buffer, packs `records` into it and completes it.
  // Returns false when the capture refused a buffer (the records are then "dropped").
  template <typename... Records>
  bool deliver(const Records&... records) {
    uint8_t* buffer = nullptr;
    size_t size = 0;
    size_t max_records = 0;
    requested(&buffer, &size, &max_records);
    if (!buffer) return false;
    size_t offset = 0;
    record_offsets_.clear();
    auto pack = [&](const auto& record) {
      std::memcpy(buffer + offset, &record, sizeof(record));
      record_offsets_.push_back(offset);
      offset += record_size(record.kind);
    };
    (pack(records), ...);
    completed(nullptr, 0, buffer, size, offset);
    return true;
  }

  // Plays a CUPTI of another version whose record of `kind` is `extent` bytes: the first
  // `extent` bytes of `record` are packed, followed by one `next` record.
  template <typename Record, typename Next>
  bool deliver_shortened(const Record& record, size_t extent, const Next& next) {
    uint8_t* buffer = nullptr;
    size_t size = 0;
    size_t max_records = 0;
    requested(&buffer, &size, &max_records);
    if (!buffer) return false;
    record_offsets_ = {0, extent};
    std::memcpy(buffer, &record, extent);
    std::memcpy(buffer + extent, &next, sizeof(next));
    completed(nullptr, 0, buffer, size, extent + record_size(next.kind));
    return true;
  }

  // Plays a buffer whose valid bytes end `valid_bytes` into its only record.
  template <typename Record>
  bool deliver_truncated(const Record& record, size_t valid_bytes) {
    uint8_t* buffer = nullptr;
    size_t size = 0;
    size_t max_records = 0;
    requested(&buffer, &size, &max_records);
    if (!buffer) return false;
    record_offsets_ = {0};
    std::memcpy(buffer, &record, sizeof(record));
    completed(nullptr, 0, buffer, size, valid_bytes);
    return true;
  }

 private:
  std::vector<size_t> record_offsets_;  // of the buffer being delivered
};

// A concurrent-kernel record as CUPTI 13.0 delivers it (times 1000 + id, 2000 + id).
inline inject::CuptiKernelRecord fake_kernel_record(uint32_t correlation) {
  inject::CuptiKernelRecord kernel;
  std::memset(&kernel, 0, sizeof(kernel));
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.name = "moe_grouped_gemm";
  kernel.start = 1000 + correlation;
  kernel.end = 2000 + correlation;
  kernel.correlationId = correlation;
  return kernel;
}

}  // namespace moescope::testing
