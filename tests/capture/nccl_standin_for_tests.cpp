// libnccl_standin_for_tests.so — a TEST-ONLY stand-in for NCCL. It is not NCCL and moves no
// data. It exports the `pnccl*` entry points the moescope shim forwards to (and `nccl*` ones
// that forward to them, as the real library does), writes every call with its arguments as
// one line to the file named by NCCL_STANDIN_LOG, and returns fixed, known results:
//   ncclGetVersion -> 29999 (no real NCCL has it), ncclBroadcast with root 99 ->
//   ncclInvalidArgument, everything else -> ncclSuccess.
// Communicators are small objects logged as comm#N so logs of two runs compare equal.
// Built against moescope's own NCCL ABI header; the test program calling it uses the real
// nccl.h, so a mismatch between the two shows up as a wrong argument in the log.
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl_abi.h"

namespace nccl = moescope::inject::nccl;

struct moescope::inject::nccl::Comm {
  int ordinal;
  int rank;
  int num_ranks;
  int device;
};

namespace {

constexpr int kStandinVersion = 29999;

std::mutex g_mutex;
// Owned until exit (never freed at destroy, so a stale handle still logs its ordinal).
std::vector<std::unique_ptr<nccl::Comm>> g_comms;

void log_line(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_line(const char* format, ...) {
  const char* path = std::getenv("NCCL_STANDIN_LOG");
  if (!path || !*path) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* file = std::fopen(path, "a");
  if (!file) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(file, format, args);
  va_end(args);
  std::fputc('\n', file);
  std::fclose(file);
}

nccl::Comm* new_comm(int rank, int num_ranks, int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_comms.push_back(std::make_unique<nccl::Comm>(
      nccl::Comm{static_cast<int>(g_comms.size()) + 1, rank, num_ranks, device}));
  return g_comms.back().get();
}

int ordinal(nccl::CommHandle comm) {
  return comm ? comm->ordinal : 0;
}

// First bytes of a unique id as hex: enough to see it arrived intact.
std::string id_prefix(const nccl::UniqueId& id) {
  char text[33];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(text + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[i]));
  }
  return text;
}

uintptr_t address(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer);
}

}  // namespace

#define STANDIN_API extern "C" __attribute__((visibility("default")))

// Not logged: the shim asks for the version itself, so the log would differ between runs.
STANDIN_API nccl::Result pncclGetVersion(int* version) {
  *version = kStandinVersion;
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclGetUniqueId(nccl::UniqueId* id) {
  for (size_t i = 0; i < sizeof(id->internal); ++i) id->internal[i] = static_cast<char>(3 * i + 1);
  log_line("GetUniqueId");
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclCommInitRank(nccl::CommHandle* comm, int nranks, nccl::UniqueId id,
                                           int rank) {
  *comm = new_comm(rank, nranks, 5);
  log_line("CommInitRank nranks=%d id=%s last=%d rank=%d -> comm#%d", nranks, id_prefix(id).c_str(),
           id.internal[127], rank, ordinal(*comm));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclCommInitRankConfig(nccl::CommHandle* comm, int nranks,
                                                 nccl::UniqueId id, int rank,
                                                 nccl::Config* config) {
  *comm = new_comm(rank, nranks, 5);
  log_line("CommInitRankConfig nranks=%d id=%s rank=%d config=0x%" PRIxPTR " -> comm#%d", nranks,
           id_prefix(id).c_str(), rank, address(config), ordinal(*comm));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclCommSplit(nccl::CommHandle comm, int color, int key,
                                        nccl::CommHandle* new_comm_out, nccl::Config* config) {
  *new_comm_out = color == nccl::kSplitNoColor ? nullptr : new_comm(key, 2, comm->device);
  log_line("CommSplit comm#%d color=%d key=%d config=0x%" PRIxPTR " -> comm#%d", ordinal(comm),
           color, key, address(config), ordinal(*new_comm_out));
  return nccl::kSuccess;
}

// Queries the shim makes: answered, not logged (a run without the shim does not make them).
STANDIN_API nccl::Result pncclCommUserRank(nccl::CommHandle comm, int* rank) {
  *rank = comm->rank;
  return nccl::kSuccess;
}
STANDIN_API nccl::Result pncclCommCount(nccl::CommHandle comm, int* count) {
  *count = comm->num_ranks;
  return nccl::kSuccess;
}
STANDIN_API nccl::Result pncclCommCuDevice(nccl::CommHandle comm, int* device) {
  *device = comm->device;
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclCommDestroy(nccl::CommHandle comm) {
  log_line("CommDestroy comm#%d", ordinal(comm));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclCommAbort(nccl::CommHandle comm) {
  log_line("CommAbort comm#%d", ordinal(comm));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclAllReduce(const void* send, void* recv, size_t count,
                                        nccl::DataType dtype, nccl::RedOp op, nccl::CommHandle comm,
                                        nccl::Stream stream) {
  log_line("AllReduce send=0x%" PRIxPTR " recv=0x%" PRIxPTR
           " count=%zu dtype=%d op=%d comm#%d "
           "stream=0x%" PRIxPTR,
           address(send), address(recv), count, static_cast<int>(dtype), static_cast<int>(op),
           ordinal(comm), address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclAllGather(const void* send, void* recv, size_t sendcount,
                                        nccl::DataType dtype, nccl::CommHandle comm,
                                        nccl::Stream stream) {
  log_line("AllGather send=0x%" PRIxPTR " recv=0x%" PRIxPTR
           " count=%zu dtype=%d comm#%d "
           "stream=0x%" PRIxPTR,
           address(send), address(recv), sendcount, static_cast<int>(dtype), ordinal(comm),
           address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclReduceScatter(const void* send, void* recv, size_t recvcount,
                                            nccl::DataType dtype, nccl::RedOp op,
                                            nccl::CommHandle comm, nccl::Stream stream) {
  log_line("ReduceScatter send=0x%" PRIxPTR " recv=0x%" PRIxPTR
           " count=%zu dtype=%d op=%d "
           "comm#%d stream=0x%" PRIxPTR,
           address(send), address(recv), recvcount, static_cast<int>(dtype), static_cast<int>(op),
           ordinal(comm), address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclBroadcast(const void* send, void* recv, size_t count,
                                        nccl::DataType dtype, int root, nccl::CommHandle comm,
                                        nccl::Stream stream) {
  log_line("Broadcast send=0x%" PRIxPTR " recv=0x%" PRIxPTR
           " count=%zu dtype=%d root=%d "
           "comm#%d stream=0x%" PRIxPTR,
           address(send), address(recv), count, static_cast<int>(dtype), root, ordinal(comm),
           address(stream));
  return root == 99 ? nccl::kInvalidArgument : nccl::kSuccess;
}

STANDIN_API nccl::Result pncclReduce(const void* send, void* recv, size_t count,
                                     nccl::DataType dtype, nccl::RedOp op, int root,
                                     nccl::CommHandle comm, nccl::Stream stream) {
  log_line("Reduce send=0x%" PRIxPTR " recv=0x%" PRIxPTR
           " count=%zu dtype=%d op=%d root=%d "
           "comm#%d stream=0x%" PRIxPTR,
           address(send), address(recv), count, static_cast<int>(dtype), static_cast<int>(op), root,
           ordinal(comm), address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclAlltoAll(const void* send, void* recv, size_t count,
                                       nccl::DataType dtype, nccl::CommHandle comm,
                                       nccl::Stream stream) {
  log_line("AlltoAll send=0x%" PRIxPTR " recv=0x%" PRIxPTR
           " count=%zu dtype=%d comm#%d "
           "stream=0x%" PRIxPTR,
           address(send), address(recv), count, static_cast<int>(dtype), ordinal(comm),
           address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclSend(const void* send, size_t count, nccl::DataType dtype, int peer,
                                   nccl::CommHandle comm, nccl::Stream stream) {
  log_line("Send send=0x%" PRIxPTR " count=%zu dtype=%d peer=%d comm#%d stream=0x%" PRIxPTR,
           address(send), count, static_cast<int>(dtype), peer, ordinal(comm), address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclRecv(void* recv, size_t count, nccl::DataType dtype, int peer,
                                   nccl::CommHandle comm, nccl::Stream stream) {
  log_line("Recv recv=0x%" PRIxPTR " count=%zu dtype=%d peer=%d comm#%d stream=0x%" PRIxPTR,
           address(recv), count, static_cast<int>(dtype), peer, ordinal(comm), address(stream));
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclGroupStart() {
  log_line("GroupStart");
  return nccl::kSuccess;
}

STANDIN_API nccl::Result pncclGroupEnd() {
  log_line("GroupEnd");
  return nccl::kSuccess;
}

// Ends the group without running its ops (NCCL estimates their time into sim_info).
STANDIN_API nccl::Result pncclGroupSimulateEnd(nccl::SimInfo* sim_info) {
  log_line("GroupSimulateEnd sim_info=%s", sim_info ? "given" : "null");  // a stack address
  return nccl::kSuccess;
}

// The child keeps the parent's size minus the excluded ranks; its rank is the parent's.
STANDIN_API nccl::Result pncclCommShrink(nccl::CommHandle comm, int* exclude, int exclude_count,
                                         nccl::CommHandle* new_comm_out, nccl::Config* config,
                                         int flags) {
  *new_comm_out = new_comm(comm->rank, comm->num_ranks - exclude_count, comm->device);
  log_line("CommShrink comm#%d exclude=%d..%d config=0x%" PRIxPTR " flags=%d -> comm#%d",
           ordinal(comm), exclude_count > 0 ? exclude[0] : -1,
           exclude_count > 0 ? exclude[exclude_count - 1] : -1, address(config), flags,
           ordinal(*new_comm_out));
  return nccl::kSuccess;
}

// The public names forward to the profiling twins, as in the real library.
STANDIN_API nccl::Result ncclGetVersion(int* version) {
  return pncclGetVersion(version);
}
STANDIN_API nccl::Result ncclGetUniqueId(nccl::UniqueId* id) {
  return pncclGetUniqueId(id);
}
STANDIN_API nccl::Result ncclCommInitRank(nccl::CommHandle* comm, int nranks, nccl::UniqueId id,
                                          int rank) {
  return pncclCommInitRank(comm, nranks, id, rank);
}
STANDIN_API nccl::Result ncclCommInitRankConfig(nccl::CommHandle* comm, int nranks,
                                                nccl::UniqueId id, int rank, nccl::Config* config) {
  return pncclCommInitRankConfig(comm, nranks, id, rank, config);
}
STANDIN_API nccl::Result ncclCommSplit(nccl::CommHandle comm, int color, int key,
                                       nccl::CommHandle* new_comm_out, nccl::Config* config) {
  return pncclCommSplit(comm, color, key, new_comm_out, config);
}
STANDIN_API nccl::Result ncclCommUserRank(nccl::CommHandle comm, int* rank) {
  return pncclCommUserRank(comm, rank);
}
STANDIN_API nccl::Result ncclCommCount(nccl::CommHandle comm, int* count) {
  return pncclCommCount(comm, count);
}
STANDIN_API nccl::Result ncclCommCuDevice(nccl::CommHandle comm, int* device) {
  return pncclCommCuDevice(comm, device);
}
STANDIN_API nccl::Result ncclCommDestroy(nccl::CommHandle comm) {
  return pncclCommDestroy(comm);
}
STANDIN_API nccl::Result ncclCommAbort(nccl::CommHandle comm) {
  return pncclCommAbort(comm);
}
STANDIN_API nccl::Result ncclAllReduce(const void* send, void* recv, size_t count,
                                       nccl::DataType dtype, nccl::RedOp op, nccl::CommHandle comm,
                                       nccl::Stream stream) {
  return pncclAllReduce(send, recv, count, dtype, op, comm, stream);
}
STANDIN_API nccl::Result ncclAllGather(const void* send, void* recv, size_t sendcount,
                                       nccl::DataType dtype, nccl::CommHandle comm,
                                       nccl::Stream stream) {
  return pncclAllGather(send, recv, sendcount, dtype, comm, stream);
}
STANDIN_API nccl::Result ncclReduceScatter(const void* send, void* recv, size_t recvcount,
                                           nccl::DataType dtype, nccl::RedOp op,
                                           nccl::CommHandle comm, nccl::Stream stream) {
  return pncclReduceScatter(send, recv, recvcount, dtype, op, comm, stream);
}
STANDIN_API nccl::Result ncclBroadcast(const void* send, void* recv, size_t count,
                                       nccl::DataType dtype, int root, nccl::CommHandle comm,
                                       nccl::Stream stream) {
  return pncclBroadcast(send, recv, count, dtype, root, comm, stream);
}
STANDIN_API nccl::Result ncclReduce(const void* send, void* recv, size_t count,
                                    nccl::DataType dtype, nccl::RedOp op, int root,
                                    nccl::CommHandle comm, nccl::Stream stream) {
  return pncclReduce(send, recv, count, dtype, op, root, comm, stream);
}
STANDIN_API nccl::Result ncclAlltoAll(const void* send, void* recv, size_t count,
                                      nccl::DataType dtype, nccl::CommHandle comm,
                                      nccl::Stream stream) {
  return pncclAlltoAll(send, recv, count, dtype, comm, stream);
}
STANDIN_API nccl::Result ncclSend(const void* send, size_t count, nccl::DataType dtype, int peer,
                                  nccl::CommHandle comm, nccl::Stream stream) {
  return pncclSend(send, count, dtype, peer, comm, stream);
}
STANDIN_API nccl::Result ncclRecv(void* recv, size_t count, nccl::DataType dtype, int peer,
                                  nccl::CommHandle comm, nccl::Stream stream) {
  return pncclRecv(recv, count, dtype, peer, comm, stream);
}
STANDIN_API nccl::Result ncclGroupStart() {
  return pncclGroupStart();
}
STANDIN_API nccl::Result ncclGroupEnd() {
  return pncclGroupEnd();
}
STANDIN_API nccl::Result ncclGroupSimulateEnd(nccl::SimInfo* sim_info) {
  return pncclGroupSimulateEnd(sim_info);
}
STANDIN_API nccl::Result ncclCommShrink(nccl::CommHandle comm, int* exclude, int exclude_count,
                                        nccl::CommHandle* new_comm_out, nccl::Config* config,
                                        int flags) {
  return pncclCommShrink(comm, exclude, exclude_count, new_comm_out, config, flags);
}
