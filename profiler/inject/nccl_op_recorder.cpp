#include "nccl_op_recorder.h"

#include <atomic>
#include <cstring>
#include <string>

namespace moescope::inject {
namespace {

std::atomic<uint64_t> g_next_group_id{1};

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

bool succeeded(int result) {
  return result == nccl::kSuccess || result == nccl::kInProgress;
}

}  // namespace

NcclOpRecorder::NcclOpRecorder(NcclCommQueries& queries, NcclCompletionTracker& tracker,
                               Clock clock, Emit emit)
    : queries_(queries), tracker_(tracker), clock_(std::move(clock)), emit_(std::move(emit)) {}

uint64_t NcclOpRecorder::comm_id_of(const nccl::UniqueId& id) {
  return fnv1a(id.internal, sizeof(id.internal));
}

uint64_t NcclOpRecorder::next_split_id(nccl::CommHandle parent, int color) {
  std::lock_guard<std::mutex> lock(comms_mutex_);
  CommInfo& info = comm_info_locked(parent);
  uint64_t key[3] = {info.comm_id, static_cast<uint64_t>(static_cast<int64_t>(color)),
                     info.splits++};
  return fnv1a(key, sizeof(key));
}

uint64_t NcclOpRecorder::next_shrink_id(nccl::CommHandle parent, const int* excluded,
                                        int excluded_count) {
  std::lock_guard<std::mutex> lock(comms_mutex_);
  CommInfo& info = comm_info_locked(parent);
  // A color no split uses keeps shrink ids apart from split ids of the same parent.
  uint64_t key[3] = {info.comm_id, 0x5348524bull /* "SHRK" */, info.splits++};
  uint64_t hash = fnv1a(key, sizeof(key));
  if (excluded && excluded_count > 0) {
    hash = fnv1a(excluded, sizeof(int) * static_cast<size_t>(excluded_count), hash);
  }
  return hash;
}

NcclOpRecorder::CommInfo& NcclOpRecorder::comm_info_locked(nccl::CommHandle comm) {
  auto [it, inserted] = comms_.try_emplace(comm);
  CommInfo& info = it->second;
  if (inserted) {
    // Created before we saw it (e.g. before recording started): identify it by address.
    info.comm_id = fnv1a(&comm, sizeof(comm));
  }
  // Non-blocking communicators answer these only once initialized: retried until known.
  if (info.rank < 0 && !queries_.user_rank(comm, &info.rank)) info.rank = -1;
  if (info.num_ranks < 0 && !queries_.count(comm, &info.num_ranks)) info.num_ranks = -1;
  if (info.device < 0 && !queries_.cuda_device(comm, &info.device)) info.device = -1;
  return info;
}

void NcclOpRecorder::comm_created(nccl::CommHandle comm, uint64_t comm_id, int rank, int num_ranks,
                                  const char* call_name, uint64_t begin_ns) {
  moescope_comm_op_info info{};
  {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    CommInfo fresh;
    fresh.comm_id = comm_id;
    fresh.rank = rank;
    fresh.num_ranks = num_ranks;
    comms_[comm] = fresh;
    CommInfo& known = comm_info_locked(comm);
    info.comm_id = known.comm_id;
    info.rank = known.rank;
    info.num_ranks = known.num_ranks;
    info.device = known.device;
  }
  emit_lifecycle(info, MOESCOPE_COMM_INIT, call_name, begin_ns);
}

void NcclOpRecorder::comm_aborting(nccl::CommHandle comm) {
  uint64_t comm_id = 0;
  {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    auto found = comms_.find(comm);
    if (found == comms_.end()) return;  // never seen: no op of it can be pending
    comm_id = found->second.comm_id;
  }
  tracker_.abort_comm(comm_id, "ncclCommAbort");
}

void NcclOpRecorder::comm_destroyed(nccl::CommHandle comm, const char* call_name,
                                    uint64_t begin_ns) {
  // The interposer reports an abort only after the real call returned; the ops still pending
  // then are written as aborted here (comm_aborting before the call closes that window).
  if (call_name && std::strcmp(call_name, "ncclCommAbort") == 0) comm_aborting(comm);
  moescope_comm_op_info info{};
  {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    auto found = comms_.find(comm);
    if (found == comms_.end()) return;  // never seen: nothing to close
    info.comm_id = found->second.comm_id;
    info.rank = found->second.rank;
    info.num_ranks = found->second.num_ranks;
    info.device = found->second.device;
    info.sequence = found->second.next_sequence;
    comms_.erase(found);
  }
  emit_lifecycle(info, MOESCOPE_COMM_DESTROY, call_name, begin_ns);
}

void NcclOpRecorder::emit_lifecycle(moescope_comm_op_info& info, moescope_comm_kind kind,
                                    const char* call_name, uint64_t begin_ns) {
  info.kind = kind;
  info.peer = -1;
  info.root = -1;
  info.enqueue_ns = begin_ns;
  info.start_ns = begin_ns;
  info.end_ns = clock_();
  info.name = moescope_intern(call_name);
  if (emit_) emit_(info);
}

NcclOpRecorder::ThreadGroup& NcclOpRecorder::thread_group() {
  static thread_local ThreadGroup group;
  return group;
}

void NcclOpRecorder::group_start() {
  ThreadGroup& group = thread_group();
  if (group.depth++ == 0) group.group_id = g_next_group_id.fetch_add(1);
}

uint64_t NcclOpRecorder::current_group_id() const {
  const ThreadGroup& group = thread_group();
  return group.depth > 0 ? group.group_id : 0;
}

void NcclOpRecorder::group_end_before() {
  ThreadGroup& group = thread_group();
  if (group.depth != 1) return;
  for (const GroupedOp& op : group.ops) {
    bool seen = false;
    for (const StreamMarks& marks : group.streams) {
      seen = seen || (marks.stream == op.stream && marks.device == op.device);
    }
    if (!seen) group.streams.push_back({op.device, op.stream, tracker_.mark(op.device, op.stream)});
  }
}

void NcclOpRecorder::group_end_after(int result) {
  ThreadGroup& group = thread_group();
  if (group.depth == 0) return;  // unbalanced ncclGroupEnd: NCCL reports it, we ignore it
  if (--group.depth > 0) return;
  if (!succeeded(result)) {
    note_failure("ncclGroupEnd", result);
  } else {
    {
      // Numbered now, in issue order: the group's ops reach the other ranks only here.
      std::lock_guard<std::mutex> lock(comms_mutex_);
      for (GroupedOp& op : group.ops)
        op.record.info.sequence = comm_info_locked(op.comm).next_sequence++;
    }
    for (StreamMarks& marks : group.streams) {
      std::vector<NcclOpRecord> ops;
      for (GroupedOp& op : group.ops) {
        if (op.stream == marks.stream && op.device == marks.device) {
          ops.push_back(std::move(op.record));
        }
      }
      NcclCompletionTracker::Mark end = tracker_.mark(marks.device, marks.stream);
      tracker_.submit(std::move(ops), std::move(marks.start), std::move(end));
    }
  }
  group.ops.clear();
  group.streams.clear();
  group.group_id = 0;
}

void NcclOpRecorder::group_simulate_end_after(int result) {
  ThreadGroup& group = thread_group();
  if (group.depth == 0) return;  // unbalanced: NCCL reports it
  if (--group.depth > 0) return;
  if (!succeeded(result)) {
    note_failure("ncclGroupSimulateEnd", result);
  } else if (!group.ops.empty()) {
    std::string text = "ncclGroupSimulateEnd: " + std::to_string(group.ops.size()) +
                       " NCCL ops simulated (estimated, not run): not recorded as ops";
    moescope_instant(moescope_intern("NCCL"), moescope_intern(text.c_str()));
  }
  group.ops.clear();
  group.streams.clear();
  group.group_id = 0;
}

NcclOpRecorder::Ticket NcclOpRecorder::op_begin(const NcclOpCall& call) {
  Ticket ticket;
  moescope_comm_op_info& info = ticket.record.info;
  info.enqueue_ns = clock_();
  info.kind = call.kind;
  info.dtype = static_cast<uint32_t>(call.dtype);
  info.count = call.count;
  info.peer = call.peer;
  info.root = call.root;
  info.name = moescope_intern(call.name);
  {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    CommInfo& comm = comm_info_locked(call.comm);
    info.comm_id = comm.comm_id;
    info.rank = comm.rank;
    info.num_ranks = comm.num_ranks;
    info.device = comm.device;
  }
  // The stream's handle is a pointer; its low 32 bits identify it within the process.
  info.stream = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(call.stream));
  info.bytes =
      op_bytes(call.kind, call.count, call.dtype, info.num_ranks, &ticket.record.split_bytes);
  info.group_id = current_group_id();
  ticket.name = call.name;
  ticket.comm = call.comm;
  ticket.device = info.device;
  ticket.stream = call.stream;
  ticket.grouped = info.group_id != 0;
  if (!ticket.grouped) ticket.start = tracker_.mark(ticket.device, ticket.stream);
  return ticket;
}

void NcclOpRecorder::op_end(Ticket& ticket, int result) {
  if (!succeeded(result)) {
    note_failure(ticket.name, result);
    return;
  }
  if (ticket.grouped) {  // numbered at the group's end (group_end_after)
    thread_group().ops.push_back(
        {std::move(ticket.record), ticket.device, ticket.stream, ticket.comm});
    return;
  }
  {
    // Numbered on success only: a rejected call was never issued to the other ranks.
    std::lock_guard<std::mutex> lock(comms_mutex_);
    ticket.record.info.sequence = comm_info_locked(ticket.comm).next_sequence++;
  }
  NcclCompletionTracker::Mark end = tracker_.mark(ticket.device, ticket.stream);
  std::vector<NcclOpRecord> ops;
  ops.push_back(std::move(ticket.record));
  tracker_.submit(std::move(ops), std::move(ticket.start), std::move(end));
}

void NcclOpRecorder::note_failure(const char* call_name, int result) {
  std::string text = std::string(call_name) + " failed (ncclResult " + std::to_string(result) + ")";
  moescope_instant(moescope_intern("NCCL"), moescope_intern(text.c_str()));
}

uint64_t NcclOpRecorder::op_bytes(uint32_t kind, uint64_t count, int dtype, int num_ranks,
                                  std::vector<uint64_t>* splits) {
  uint64_t element_bytes = nccl::data_type_bytes(dtype);
  uint64_t bytes = count * element_bytes;
  uint64_t ranks = num_ranks > 0 ? static_cast<uint64_t>(num_ranks) : 1;
  switch (kind) {
    case MOESCOPE_COMM_REDUCE_SCATTER:
      return bytes * ranks;  // count is the per-rank output: the input is num_ranks of them
    case MOESCOPE_COMM_ALL_TO_ALL:
      if (splits && num_ranks > 0 && num_ranks <= 65536) splits->assign(ranks, bytes);
      return bytes * ranks;  // count elements to each rank
    default:
      return bytes;
  }
}

}  // namespace moescope::inject
