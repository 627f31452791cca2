// The program's own CUPTI client next to the capture: the shim defines the entry points with
// which a profiler claims CUPTI (cuptiSubscribe, cuptiSubscribe_v2) or takes its activity
// buffers (cuptiActivityRegisterCallbacks), yields the capture first (cupti_injection.h:
// gpu_capture_yield), then forwards to the real libcupti unchanged.
//
// Why: CUPTI 13.0 allows one subscriber per process, and activity callbacks are process-wide.
// torch.profiler (Kineto, in libtorch_cpu.so, which links libcupti.so.13) started under
// `moescope record` would otherwise be refused its subscription, or replace moescope's buffer
// callbacks while CUPTI still holds moescope's buffers: records lost, or buffers handed to a
// client that did not allocate them. The capture's own CUPTI calls use the library's functions
// directly (dlsym on its handle) and never come through here.
#include <dlfcn.h>

#include <cstring>
#include <string>

#include <cupti_activity.h>
#include <cupti_callbacks.h>

#include "cupti_injection.h"

namespace moescope::inject {
namespace {

// The real `name` wherever the process loaded libcupti: the global scope after the shim, the
// library the capture loaded, an already-loaded libcupti.so.13 (torch's, in a local scope).
void* real_cupti_function(const char* name) {
  if (void* function = dlsym(RTLD_NEXT, name)) return function;
  if (void* function = gpu_capture_real_cupti_function(name)) return function;
  for (const char* soname : {"libcupti.so.13", "libcupti.so"}) {
    if (void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD)) {
      if (void* function = dlsym(handle, name)) return function;
    }
  }
  return nullptr;
}

// "cuptiSubscribe from libtorch_cpu.so": the object the call came from.
std::string client_of(const char* call, const void* return_address) {
  Dl_info info{};
  std::string object = "an unknown library";
  if (dladdr(return_address, &info) && info.dli_fname && *info.dli_fname) {
    const char* slash = std::strrchr(info.dli_fname, '/');
    object = slash ? slash + 1 : info.dli_fname;
  }
  return std::string(call) + " from " + object;
}

// True when libcupti calls its own entry point (through its PLT): not another client.
bool from_libcupti(const void* return_address) {
  Dl_info info{};
  return dladdr(return_address, &info) && info.dli_fname &&
         std::strstr(info.dli_fname, "libcupti") != nullptr;
}

}  // namespace
}  // namespace moescope::inject

using moescope::inject::client_of;
using moescope::inject::from_libcupti;
using moescope::inject::gpu_capture_yield;
using moescope::inject::real_cupti_function;

#define MOESCOPE_CUPTI_INTERPOSE extern "C" __attribute__((visibility("default")))

MOESCOPE_CUPTI_INTERPOSE CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber,
                                                    CUpti_CallbackFunc callback, void* userdata) {
  const void* caller = __builtin_return_address(0);
  using Fn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  auto real = reinterpret_cast<Fn>(real_cupti_function("cuptiSubscribe"));
  if (!real) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!from_libcupti(caller)) gpu_capture_yield(client_of("cuptiSubscribe", caller));
  return real(subscriber, callback, userdata);
}

MOESCOPE_CUPTI_INTERPOSE CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                                       CUpti_CallbackFunc callback, void* userdata,
                                                       CUpti_SubscriberParams* params) {
  const void* caller = __builtin_return_address(0);
  using Fn =
      CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*, CUpti_SubscriberParams*);
  auto real = reinterpret_cast<Fn>(real_cupti_function("cuptiSubscribe_v2"));
  if (!real) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!from_libcupti(caller)) gpu_capture_yield(client_of("cuptiSubscribe_v2", caller));
  return real(subscriber, callback, userdata, params);
}

MOESCOPE_CUPTI_INTERPOSE CUptiResult cuptiActivityRegisterCallbacks(
    CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed) {
  const void* caller = __builtin_return_address(0);
  using Fn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  auto real = reinterpret_cast<Fn>(real_cupti_function("cuptiActivityRegisterCallbacks"));
  if (!real) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!from_libcupti(caller)) {
    gpu_capture_yield(client_of("cuptiActivityRegisterCallbacks", caller));
  }
  return real(requested, completed);
}
