// A program that uses the NCCL API (real nccl.h) with known arguments, linked against the
// test-only stand-in library. nccl_interpose_test.cpp runs it with and without the moescope
// shim preloaded. It prints each call's result; buffers and streams are fake addresses (the
// stand-in never dereferences them).
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void* fake_pointer(uintptr_t value) {
  return reinterpret_cast<void*>(value);
}

cudaStream_t fake_stream(uintptr_t value) {
  return reinterpret_cast<cudaStream_t>(value);
}

void report(const char* call, ncclResult_t result) {
  std::printf("%s -> %d\n", call, static_cast<int>(result));
}

// `--bench N`: N all-reduces, prints the time per call (the shim's overhead is the difference
// between a run with and one without it; the stand-in does nothing when NCCL_STANDIN_LOG is
// unset).
int bench(long calls) {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 4, id, 1) != ncclSuccess) {
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) {
    ncclAllReduce(fake_pointer(0x10000), fake_pointer(0x20000), 1024, ncclFloat32, ncclSum, comm,
                  fake_stream(0x5000));
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  std::printf("ns_per_call %.1f\n", std::chrono::duration<double, std::nano>(elapsed).count() /
                                        static_cast<double>(calls));
  ncclCommDestroy(comm);
  return 0;
}

// `--restart PATH`: one all-reduce, then the recording is stopped and started again into PATH
// through the recorder's C API (found in the preloaded shim, as a program that records
// windows of its run would call it), then more calls. Without the shim it only makes the calls.
int restart(const char* second_trace) {
  using Stop = void (*)();
  using Start = int (*)(const char*, const char*);
  auto stop = reinterpret_cast<Stop>(dlsym(RTLD_DEFAULT, "moescope_recorder_stop"));
  auto start = reinterpret_cast<Start>(dlsym(RTLD_DEFAULT, "moescope_recorder_start"));
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  report("ncclGetUniqueId", ncclGetUniqueId(&id));
  report("ncclCommInitRank", ncclCommInitRank(&comm, 4, id, 1));
  void* send = fake_pointer(0x10000);
  void* recv = fake_pointer(0x20000);
  report("ncclAllReduce",
         ncclAllReduce(send, recv, 1024, ncclFloat32, ncclSum, comm, fake_stream(0x5000)));
  if (stop && start) {
    stop();
    report("moescope_recorder_start", static_cast<ncclResult_t>(start(second_trace, nullptr)));
  }
  report("ncclAllGather", ncclAllGather(send, recv, 256, ncclBfloat16, comm, fake_stream(0x5000)));
  report("ncclGroupStart", ncclGroupStart());
  report("ncclSend",
         ncclSend(fake_pointer(0x30000), 10, ncclBfloat16, 2, comm, fake_stream(0x6000)));
  report("ncclRecv",
         ncclRecv(fake_pointer(0x40000), 20, ncclBfloat16, 2, comm, fake_stream(0x6000)));
  report("ncclGroupEnd", ncclGroupEnd());
  report("ncclBroadcast", ncclBroadcast(send, recv, 64, ncclInt64, 2, comm, fake_stream(0x5000)));
  report("ncclCommDestroy", ncclCommDestroy(comm));
  return 0;
}

// `--simulate`: what libtorch_cuda also does: a group ended by ncclGroupSimulateEnd (NCCL
// estimates it, runs nothing), then an op outside any group, then a communicator shrunk from
// the first, with an op on it.
int simulate() {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  report("ncclGetUniqueId", ncclGetUniqueId(&id));
  report("ncclCommInitRank", ncclCommInitRank(&comm, 4, id, 1));
  void* send = fake_pointer(0x10000);
  void* recv = fake_pointer(0x20000);
  report("ncclGroupStart", ncclGroupStart());
  report("ncclAllReduce(simulated)",
         ncclAllReduce(send, recv, 4096, ncclFloat32, ncclSum, comm, fake_stream(0x5000)));
  ncclSimInfo_t sim_info = NCCL_SIM_INFO_INITIALIZER;
  report("ncclGroupSimulateEnd", ncclGroupSimulateEnd(&sim_info));
  report("ncclAllReduce",
         ncclAllReduce(send, recv, 1024, ncclFloat32, ncclSum, comm, fake_stream(0x5000)));
  int excluded[] = {3};
  ncclComm_t shrunk = nullptr;
  report("ncclCommShrink",
         ncclCommShrink(comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT));
  report("ncclAllGather(shrunk)",
         ncclAllGather(send, recv, 8, ncclInt8, shrunk, fake_stream(0x5000)));
  report("ncclCommDestroy(shrunk)", ncclCommDestroy(shrunk));
  report("ncclCommDestroy", ncclCommDestroy(comm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--bench") == 0) return bench(std::atol(argv[2]));
  if (argc == 2 && std::strcmp(argv[1], "--simulate") == 0) return simulate();
  if (argc == 3 && std::strcmp(argv[1], "--restart") == 0) return restart(argv[2]);

  int version = 0;
  report("ncclGetVersion", ncclGetVersion(&version));
  std::printf("version %d\n", version);

  ncclUniqueId id;
  report("ncclGetUniqueId", ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  report("ncclCommInitRank", ncclCommInitRank(&comm, 4, id, 1));

  void* send = fake_pointer(0x10000);
  void* recv = fake_pointer(0x20000);
  cudaStream_t stream = fake_stream(0x5000);
  cudaStream_t p2p_stream = fake_stream(0x6000);
  report("ncclAllReduce", ncclAllReduce(send, recv, 1024, ncclFloat32, ncclSum, comm, stream));
  report("ncclAllGather", ncclAllGather(send, recv, 256, ncclBfloat16, comm, stream));
  report("ncclReduceScatter",
         ncclReduceScatter(send, recv, 128, ncclFloat16, ncclMax, comm, stream));
  report("ncclBroadcast", ncclBroadcast(send, recv, 64, ncclInt64, 2, comm, stream));
  report("ncclReduce", ncclReduce(send, recv, 32, ncclFloat64, ncclProd, 3, comm, stream));
  report("ncclAlltoAll", ncclAlltoAll(send, recv, 16, ncclInt32, comm, stream));

  // All-to-all the PyTorch way: send/recv pairs to every peer inside one group.
  report("ncclGroupStart", ncclGroupStart());
  for (int peer = 0; peer < 4; ++peer) {
    report("ncclSend", ncclSend(fake_pointer(0x30000 + 0x100 * peer), 10 * (peer + 1), ncclBfloat16,
                                peer, comm, p2p_stream));
    report("ncclRecv", ncclRecv(fake_pointer(0x40000 + 0x100 * peer), 20 * (peer + 1), ncclBfloat16,
                                peer, comm, p2p_stream));
  }
  report("ncclGroupEnd", ncclGroupEnd());

  // The stand-in rejects root 99: the caller must see NCCL's own error.
  report("ncclBroadcast(root 99)", ncclBroadcast(send, recv, 8, ncclFloat32, 99, comm, stream));

  ncclComm_t sub = nullptr;
  report("ncclCommSplit", ncclCommSplit(comm, 0, 1, &sub, nullptr));
  report("ncclAllReduce(sub)", ncclAllReduce(send, recv, 8, ncclUint8, ncclMin, sub, stream));
  report("ncclCommDestroy(sub)", ncclCommDestroy(sub));
  report("ncclCommDestroy", ncclCommDestroy(comm));
  return 0;
}
