// libcupti.so.13 for tests — a TEST-ONLY stand-in for CUPTI, not CUPTI: it records no GPU work.
// It enforces the rules that make two CUPTI clients in one process dangerous, as CUPTI 13.0
// does:
//   - one subscriber per process: a second cuptiSubscribe(_v2) gets
//     CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (v2 also names the holder, "CUPTI for X");
//   - activity buffer callbacks are process-wide: cuptiActivityRegisterCallbacks replaces the
//     pair for everyone, and a buffer completes to the pair registered at that moment;
//   - so a buffer can reach a client that did not allocate it: counted as a violation (with the
//     real CUPTI that client frees or parses memory it does not own).
// Kernel records (the shim's CuptiKernelRecord layout) are made by the test hook
// fake_cupti_kernel(name) when CONCURRENT_KERNEL is enabled, into a buffer requested from the
// current client; a forced flush completes it. Used by cupti_two_clients_test.
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_version.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "cupti_record_types.h"

namespace {

using moescope::inject::CuptiKernelRecord;

struct Subscriber {
  std::string name;
};

struct Buffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  size_t used = 0;
  CUpti_BuffersCallbackRequestFunc from = nullptr;  // the client that allocated it
};

std::recursive_mutex g_mutex;
Subscriber* g_subscriber = nullptr;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
CUpti_BuffersCallbackRequestFunc g_request_paired_with_complete = nullptr;
CUpti_TimestampCallbackFunc g_clock = nullptr;
std::set<int> g_enabled;
Buffer g_buffer;
int g_violations = 0;
uint32_t g_correlation = 1;
std::set<std::string> g_names;  // kernel names must outlive the records

uint64_t now() {
  static uint64_t ticks = 1000;
  return g_clock ? g_clock() : (ticks += 1000);
}

void complete_buffer() {
  if (!g_buffer.data) return;
  Buffer done = g_buffer;
  g_buffer = Buffer();
  // The pair registered now gets it, whoever allocated it (CUPTI's rule).
  if (done.from != g_request_paired_with_complete) {
    ++g_violations;
    std::fprintf(stderr,
                 "fake libcupti: a buffer completed to a client that did not allocate it\n");
  }
  if (g_complete) g_complete(nullptr, 0, done.data, done.size, done.used);
}

}  // namespace

#define FAKE_CUPTI extern "C" __attribute__((visibility("default")))

FAKE_CUPTI CUptiResult cuptiGetVersion(uint32_t* version) {
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  *text = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
              ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
              : "FAKE_CUPTI_RESULT";
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* handle, CUpti_CallbackFunc, void*,
                                         CUpti_SubscriberParams* params) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (g_subscriber) {
    if (params && params->oldSubscriberName && params->oldSubscriberSize > 0) {
      std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s",
                    g_subscriber->name.c_str());
    }
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  g_subscriber = new Subscriber{std::string("CUPTI for ") +
                                (params && params->subscriberName ? params->subscriberName : "")};
  *handle = reinterpret_cast<CUpti_SubscriberHandle>(g_subscriber);
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* handle, CUpti_CallbackFunc callback,
                                      void* userdata) {
  return cuptiSubscribe_v2(handle, callback, userdata, nullptr);
}

FAKE_CUPTI CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle handle) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!handle || reinterpret_cast<Subscriber*>(handle) != g_subscriber) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  delete g_subscriber;
  g_subscriber = nullptr;
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                      CUpti_BuffersCallbackCompleteFunc complete) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_request = request;
  g_complete = complete;
  g_request_paired_with_complete = request;
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc clock) {
  g_clock = clock;
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_enabled.insert(kind);
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_enabled.erase(kind);
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) complete_buffer();  // else: only full buffers
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid_bytes,
                                                  CUpti_Activity** record) {
  size_t offset = 0;
  if (*record)
    offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer) +
             sizeof(CuptiKernelRecord);
  if (offset + sizeof(CuptiKernelRecord) > valid_bytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = 0;
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain, uint32_t, const char** name) {
  *name = "fakeCall_v1";
  return CUPTI_SUCCESS;
}

FAKE_CUPTI CUptiResult cuptiFinalize() {
  return CUPTI_SUCCESS;
}

// ---- test hooks ----------------------------------------------------------------------------

// A kernel ran: one record into the current client's buffer (when the kind is enabled).
FAKE_CUPTI void fake_cupti_kernel(const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!g_enabled.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) return;
  if (!g_buffer.data) {
    if (!g_request) return;
    size_t max_records = 0;
    g_request(&g_buffer.data, &g_buffer.size, &max_records);
    g_buffer.from = g_request;
    g_buffer.used = 0;
    if (!g_buffer.data) return;
  }
  if (g_buffer.used + sizeof(CuptiKernelRecord) > g_buffer.size) return;
  CuptiKernelRecord kernel;
  std::memset(&kernel, 0, sizeof(kernel));
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.name = g_names.insert(name).first->c_str();
  kernel.start = now();
  kernel.end = kernel.start + 500;
  kernel.correlationId = g_correlation++;
  kernel.gridX = kernel.gridY = kernel.gridZ = 1;
  kernel.blockX = kernel.blockY = kernel.blockZ = 1;
  std::memcpy(g_buffer.data + g_buffer.used, &kernel, sizeof(kernel));
  g_buffer.used += sizeof(kernel);
}

// How often a buffer completed to a client that did not allocate it.
FAKE_CUPTI int fake_cupti_violations() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_violations;
}
