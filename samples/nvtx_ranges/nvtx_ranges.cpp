// nvtx_ranges: a program annotated with NVTX only (no moescope code), to show and test what
// `moescope record` captures from any NVTX user:
//
//   thread "trainer" (default domain)          thread "loader" (domain "sample.io")
//   epoch (start/end range) ...............    for each step:
//   for each step:                               load_batch (registered string)
//     step                                         decode
//       forward
//       backward
//   mark "done"
//
//   moescope record -o nvtx.moetrace -- build/bin/nvtx_ranges --steps 3
//
// The last line printed gives the counts the trace must hold.
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

// A little work so ranges have a visible width.
double spin(int iterations) {
  volatile double sum = 0;
  for (int i = 0; i < iterations; ++i) sum = sum + i * 0.5;
  return sum;
}

// Attributes with every field zero but the version and size, as NVTX requires before use.
nvtxEventAttributes_t blank_attributes() {
  nvtxEventAttributes_t attributes;
  std::memset(&attributes, 0, sizeof(attributes));
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  return attributes;
}

nvtxEventAttributes_t attributes_for(nvtxStringHandle_t registered) {
  nvtxEventAttributes_t attributes = blank_attributes();
  attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attributes.message.registered = registered;
  return attributes;
}

nvtxEventAttributes_t attributes_for(const char* message) {
  nvtxEventAttributes_t attributes = blank_attributes();
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = message;
  return attributes;
}

void run_loader(int steps, int* pushes) {
  nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), "loader");
  nvtxDomainHandle_t io = nvtxDomainCreateA("sample.io");
  nvtxStringHandle_t load_batch = nvtxDomainRegisterStringA(io, "load_batch");
  for (int step = 0; step < steps; ++step) {
    nvtxEventAttributes_t load = attributes_for(load_batch);
    nvtxDomainRangePushEx(io, &load);
    ++*pushes;
    spin(20000);
    nvtxEventAttributes_t decode = attributes_for("decode");
    nvtxDomainRangePushEx(io, &decode);
    ++*pushes;
    spin(20000);
    nvtxDomainRangePop(io);
    nvtxDomainRangePop(io);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--steps N]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 0) {
    std::fprintf(stderr, "nvtx_ranges: --steps must be >= 0, got %d\n", steps);
    return 2;
  }
  nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), "trainer");
  nvtxRangeId_t epoch = nvtxRangeStartA("epoch");
  int loader_pushes = 0;
  std::thread loader(run_loader, steps, &loader_pushes);
  int trainer_pushes = 0;
  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA("step");
    nvtxRangePushA("forward");
    spin(30000);
    nvtxRangePop();
    nvtxRangePushA("backward");
    spin(30000);
    nvtxRangePop();
    nvtxRangePop();
    trainer_pushes += 3;
  }
  loader.join();
  nvtxMarkA("done");
  nvtxRangeEnd(epoch);
  std::printf(
      "nvtx_ranges: steps=%d trainer_ranges=%d loader_ranges=%d marks=1 start_end_ranges=1\n",
      steps, trainer_pushes, loader_pushes);
  return 0;
}
