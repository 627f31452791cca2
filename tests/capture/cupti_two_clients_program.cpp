// A program with its own CUPTI client, as torch.profiler (Kineto) is, linked against the test
// stand-in libcupti.so.13 (cupti_rules_for_tests.cpp); cupti_two_clients_test runs it under the
// moescope shim.
//   (no argument)     moescope's capture runs first; then the program subscribes, registers its
//                     buffer callbacks and enables kernels (the shim must yield first)
//   --profiler-first  the program holds CUPTI before CUDA starts (InitializeInjection, called
//                     here as the driver would at cuInit): the shim must leave CUPTI alone
// Prints what its own client saw and the stand-in's count of buffers handed to the wrong client.
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

extern "C" void fake_cupti_kernel(const char* name);
extern "C" int fake_cupti_violations();

namespace {

std::set<uint8_t*> g_my_buffers;
std::vector<std::string> g_my_kernels;
int g_foreign_buffers = 0;

void CUPTIAPI my_request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 16;
  *buffer = static_cast<uint8_t*>(std::malloc(*size));
  *max_records = 0;
  g_my_buffers.insert(*buffer);
}

void CUPTIAPI my_complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  if (!g_my_buffers.erase(buffer)) {
    ++g_foreign_buffers;  // Kineto would free() memory it does not own
    return;
  }
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      g_my_kernels.push_back(reinterpret_cast<CUpti_ActivityKernel10*>(record)->name);
    }
  }
  std::free(buffer);
}

void CUPTIAPI ignore(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// The profiler's start: subscribe, take the buffers, enable kernels.
CUpti_SubscriberHandle start_profiler() {
  CUpti_SubscriberHandle handle = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "torch.profiler";
  std::printf("cuptiSubscribe_v2 -> %d\n", cuptiSubscribe_v2(&handle, ignore, nullptr, &params));
  std::printf("cuptiActivityRegisterCallbacks -> %d\n",
              cuptiActivityRegisterCallbacks(my_request, my_complete));
  std::printf("cuptiActivityEnable -> %d\n",
              cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  return handle;
}

void stop_profiler(CUpti_SubscriberHandle handle) {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (handle) cuptiUnsubscribe(handle);
  std::printf("profiler kernels:");
  for (const std::string& name : g_my_kernels) std::printf(" %s", name.c_str());
  std::printf("\nforeign buffers %d\n", g_foreign_buffers);
}

}  // namespace

int main(int argc, char** argv) {
  bool profiler_first = argc == 2 && std::strcmp(argv[1], "--profiler-first") == 0;
  CUpti_SubscriberHandle handle = nullptr;
  if (profiler_first) {
    handle = start_profiler();
    // cuInit: the driver calls the injection entry point of CUDA_INJECTION64_PATH.
    using Initialize = int (*)();
    if (auto initialize =
            reinterpret_cast<Initialize>(dlsym(RTLD_DEFAULT, "InitializeInjection"))) {
      initialize();
    }
    fake_cupti_kernel("kernel_during_profiler");
  } else {
    fake_cupti_kernel("kernel_before_profiler");  // moescope's capture is on
    handle = start_profiler();
    fake_cupti_kernel("kernel_during_profiler");
  }
  stop_profiler(handle);
  std::printf("violations %d\n", fake_cupti_violations());
  return 0;
}
