#include "cupti_api.h"
#include "moescope/trace/recording_environment.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace moescope::inject {
namespace {

template <typename Function>
bool resolve_symbol(void* handle, const char* name, Function& out, std::string* missing) {
  out = reinterpret_cast<Function>(dlsym(handle, name));
  if (!out && missing->empty()) *missing = name;
  return out != nullptr;
}

// Candidates in order of preference. An already-loaded copy comes first: two CUPTI instances
// in one process (ours and torch's) would fight over the driver's callbacks.
std::vector<std::string> cupti_candidates() {
  std::vector<std::string> candidates;
  // A path the user named is the only candidate: a silent fallback would hide the mistake.
  if (const char* path = std::getenv(trace::environment::kCuptiPath); path && *path) return {path};
  for (const char* name : {"libcupti.so.13", "libcupti.so"}) candidates.emplace_back(name);
  for (const char* dir :
       {"/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64", "/usr/local/cuda/lib"}) {
    candidates.emplace_back(std::string(dir) + "/libcupti.so.13");
  }
  return candidates;
}

}  // namespace

std::unique_ptr<DlopenCuptiApi> DlopenCuptiApi::load(std::string* error) {
  std::unique_ptr<DlopenCuptiApi> api(new DlopenCuptiApi());
  std::vector<std::string> candidates = cupti_candidates();
  for (const std::string& candidate : candidates) {
    api->handle_ = dlopen(candidate.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (api->handle_) {
      api->library_path_ = candidate;
      break;
    }
  }
  std::string tried;
  for (size_t i = 0; !api->handle_ && i < candidates.size(); ++i) {
    api->handle_ = dlopen(candidates[i].c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (api->handle_) {
      api->library_path_ = candidates[i];
    } else {
      tried += (tried.empty() ? "" : ", ") + candidates[i];
    }
  }
  if (!api->handle_) {
    if (error) *error = "libcupti not found (tried " + tried + "; set MOESCOPE_CUPTI_PATH)";
    return nullptr;
  }
  if (!api->resolve(error)) return nullptr;
  return api;
}

bool DlopenCuptiApi::resolve(std::string* error) {
  std::string missing;
  resolve_symbol(handle_, "cuptiActivityRegisterCallbacks", register_callbacks_, &missing);
  resolve_symbol(handle_, "cuptiActivityRegisterTimestampCallback", register_timestamp_callback_,
                 &missing);
  resolve_symbol(handle_, "cuptiActivityEnable", enable_, &missing);
  resolve_symbol(handle_, "cuptiActivityDisable", disable_, &missing);
  resolve_symbol(handle_, "cuptiActivityFlushAll", flush_all_, &missing);
  resolve_symbol(handle_, "cuptiActivityGetNextRecord", next_record_, &missing);
  resolve_symbol(handle_, "cuptiActivityGetNumDroppedRecords", dropped_records_, &missing);
  resolve_symbol(handle_, "cuptiGetCallbackName", callback_name_, &missing);
  resolve_symbol(handle_, "cuptiFinalize", finalize_, &missing);
  resolve_symbol(handle_, "cuptiSubscribe", subscribe_, &missing);
  resolve_symbol(handle_, "cuptiUnsubscribe", unsubscribe_, &missing);
  std::string optional;  // older libraries lack it: cuptiSubscribe then
  resolve_symbol(handle_, "cuptiSubscribe_v2", subscribe_v2_, &optional);
  resolve_symbol(handle_, "cuptiGetVersion", get_version_, &missing);
  resolve_symbol(handle_, "cuptiGetResultString", result_string_, &missing);
  if (missing.empty()) return true;
  if (error) *error = library_path_ + " lacks " + missing + " (CUPTI too old?)";
  return false;
}

void* DlopenCuptiApi::symbol(const char* name) const {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

DlopenCuptiApi::~DlopenCuptiApi() {
  // Never dlclose: CUPTI may still own threads and callbacks pointing into it.
}

CUptiResult DlopenCuptiApi::register_callbacks(CUpti_BuffersCallbackRequestFunc requested,
                                               CUpti_BuffersCallbackCompleteFunc completed) {
  return register_callbacks_(requested, completed);
}

CUptiResult DlopenCuptiApi::register_timestamp_callback(CUpti_TimestampCallbackFunc clock) {
  return register_timestamp_callback_(clock);
}

CUptiResult DlopenCuptiApi::enable(CUpti_ActivityKind kind) {
  return enable_(kind);
}

CUptiResult DlopenCuptiApi::disable(CUpti_ActivityKind kind) {
  return disable_(kind);
}

CUptiResult DlopenCuptiApi::flush_all(uint32_t flag) {
  return flush_all_(flag);
}

CUptiResult DlopenCuptiApi::next_record(uint8_t* buffer, size_t valid_bytes,
                                        CUpti_Activity** record) {
  return next_record_(buffer, valid_bytes, record);
}

CUptiResult DlopenCuptiApi::dropped_records(size_t* dropped) {
  return dropped_records_(nullptr, 0, dropped);
}

const char* DlopenCuptiApi::callback_name(CUpti_CallbackDomain domain, uint32_t cbid) {
  const char* name = nullptr;
  if (callback_name_(domain, cbid, &name) != CUPTI_SUCCESS) return nullptr;
  return name;
}

CUptiResult DlopenCuptiApi::finalize() {
  return finalize_();
}

namespace {
// The subscriber's callback: the activity API needs none (no callback is ever enabled).
void CUPTIAPI ignore_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
}  // namespace

CUptiResult DlopenCuptiApi::subscribe(const char* name, std::string* holder) {
  if (subscriber_) return CUPTI_SUCCESS;
  if (!subscribe_v2_) return subscribe_(&subscriber_, ignore_callback, nullptr);
  char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = name;
  params.oldSubscriberName = old_name;
  params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
  CUptiResult result = subscribe_v2_(&subscriber_, ignore_callback, nullptr, &params);
  if (result != CUPTI_SUCCESS) subscriber_ = nullptr;
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && holder) *holder = old_name;
  return result;
}

CUptiResult DlopenCuptiApi::unsubscribe() {
  if (!subscriber_) return CUPTI_SUCCESS;
  CUptiResult result = unsubscribe_(subscriber_);
  subscriber_ = nullptr;
  return result;
}

CUptiResult DlopenCuptiApi::get_version(uint32_t* version) {
  return get_version_(version);
}

std::string DlopenCuptiApi::error_text(CUptiResult result) {
  const char* text = nullptr;
  if (result_string_(result, &text) == CUPTI_SUCCESS && text) return text;
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

bool cuda_driver_loadable(const char* library) {
  if (!library || !*library) return false;
  if (dlopen(library, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)) return true;
  // Kept loaded on success: CUPTI loads the driver right after anyway.
  return dlopen(library, RTLD_LAZY | RTLD_LOCAL) != nullptr;
}

}  // namespace moescope::inject
