// NCCL op recording and GPU completion timing, on CPU with a fake GPU event layer and a fake
// host clock: which events are recorded where, how GPU times map onto the host clock, groups,
// graph capture, failures, shutdown.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "nccl_completion_tracker.h"
#include "nccl_fake_gpu_events.h"
#include "nccl_op_recorder.h"

namespace moescope::testing {
namespace {

using inject::NcclCompletionTracker;
using inject::NcclOpCall;
using inject::NcclOpRecord;
using inject::NcclOpRecorder;
using inject::NcclPollerGate;
namespace nccl = inject::nccl;

nccl::CommHandle fake_comm(uintptr_t value) {
  return reinterpret_cast<nccl::CommHandle>(value);
}
nccl::Stream fake_stream(uintptr_t value) {
  return reinterpret_cast<nccl::Stream>(value);
}

// One rank's recording machinery wired to fakes; emitted ops and comm events are collected.
struct Harness {
  uint64_t host_now = 1'000'000;
  FakeGpuEvents gpu{&host_now};
  FakeCommQueries queries;
  std::mutex emitted_mutex;
  std::vector<moescope_comm_op_info> ops;
  std::vector<std::vector<uint64_t>> op_splits;
  std::vector<moescope_comm_op_info> comm_events;
  std::vector<std::string> notes;              // the tracker's notes for the trace
  std::vector<moescope_comm_op_info> entered;  // ops reported waiting for the GPU
  NcclCompletionTracker tracker;
  NcclOpRecorder recorder;

  explicit Harness(NcclCompletionTracker::Options options = {})
      : tracker(
            gpu, [this] { return host_now; },
            [this](const NcclOpRecord& op) {
              std::lock_guard<std::mutex> lock(emitted_mutex);
              ops.push_back(op.info);
              op_splits.push_back(op.split_bytes);
            },
            collecting(options)),
        recorder(
            queries, tracker, [this] { return host_now; },
            [this](const moescope_comm_op_info& info) { comm_events.push_back(info); }) {}

  size_t emitted() {
    std::lock_guard<std::mutex> lock(emitted_mutex);
    return ops.size();
  }

  NcclCompletionTracker::Options collecting(NcclCompletionTracker::Options options) {
    options.note = [this](const std::string& text) {
      std::lock_guard<std::mutex> lock(emitted_mutex);
      notes.push_back(text);
    };
    options.entered = [this](const moescope_comm_op_info& info) {
      std::lock_guard<std::mutex> lock(emitted_mutex);
      entered.push_back(info);
    };
    return options;
  }

  void issue(uint32_t kind, const char* name, uint64_t count, int dtype, int peer, int root,
             nccl::CommHandle comm, nccl::Stream stream, int result = nccl::kSuccess) {
    NcclOpCall call{kind, name, count, dtype, peer, root, comm, stream};
    NcclOpRecorder::Ticket ticket = recorder.op_begin(call);
    recorder.op_end(ticket, result);
  }
};

const nccl::CommHandle kComm = fake_comm(0xC0);
const nccl::Stream kStream = fake_stream(0x5000);
const nccl::Stream kOtherStream = fake_stream(0x6000);

// Waits up to timeout_ms for a forked child and returns its wait status; a child still running
// then is killed and reported as hung (nullopt).
std::optional<int> wait_for_child(pid_t child, int timeout_ms) {
  int status = 0;
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (waitpid(child, &status, WNOHANG) == child) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (waitpid(child, &status, WNOHANG) == child) return status;
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return std::nullopt;
}

TEST(NcclCompletion, UngroupedOpGetsItsGpuTimesOnTheHostClock) {
  Harness h;
  h.queries.comms[kComm] = {1, 4, 0};
  h.recorder.comm_created(kComm, 77, 1, 4, "ncclCommInitRank", h.host_now);
  ASSERT_EQ(h.comm_events.size(), 1u);
  EXPECT_EQ(h.comm_events[0].kind, MOESCOPE_COMM_INIT);
  EXPECT_EQ(h.comm_events[0].comm_id, 77u);
  EXPECT_EQ(h.comm_events[0].device, 0);

  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 1024, nccl::kFloat32, -1, -1, kComm, kStream);
  // Nothing synchronizes on the thread that issues the op (a CUDA graph may be captured there
  // or elsewhere): the reference comes from the poller.
  EXPECT_EQ(h.gpu.reference_records, 0);
  auto events = h.gpu.recorded_events();
  ASSERT_EQ(events.size(), 2u);  // start and end, both on the op's stream
  EXPECT_EQ(events[0]->stream, kStream);
  EXPECT_EQ(events[1]->stream, kStream);
  EXPECT_EQ(h.tracker.poll(), 0u);  // the GPU has not run it yet
  EXPECT_EQ(h.gpu.reference_records, 1);
  EXPECT_EQ(h.emitted(), 0u);

  h.host_now = 9'000'000;  // later host polls do not change the GPU times
  h.gpu.complete(events[0], 3'000'000);
  h.gpu.complete(events[1], 3'500'000);
  EXPECT_EQ(h.tracker.poll(), 1u);
  ASSERT_EQ(h.ops.size(), 1u);
  const moescope_comm_op_info& op = h.ops[0];
  EXPECT_EQ(op.enqueue_ns, 1'000'000u);
  EXPECT_NEAR(static_cast<double>(op.start_ns), 3'000'000.0, 200.0);
  EXPECT_NEAR(static_cast<double>(op.end_ns), 3'500'000.0, 200.0);
  EXPECT_EQ(op.kind, MOESCOPE_COMM_ALL_REDUCE);
  EXPECT_EQ(op.count, 1024u);
  EXPECT_EQ(op.bytes, 4096u);
  EXPECT_EQ(op.dtype, static_cast<uint32_t>(nccl::kFloat32));
  EXPECT_EQ(op.comm_id, 77u);
  EXPECT_EQ(op.rank, 1);
  EXPECT_EQ(op.num_ranks, 4);
  EXPECT_EQ(op.device, 0);
  EXPECT_EQ(op.stream, 0x5000u);
  EXPECT_EQ(op.group_id, 0u);
  EXPECT_EQ(op.sequence, 0u);
  EXPECT_EQ(op.peer, -1);
}

TEST(NcclCompletion, AllToAllAsGroupedSendRecvSharesOneGroupAndIsTimedAtGroupEnd) {
  Harness h;
  h.queries.comms[kComm] = {0, 4, 2};
  h.recorder.group_start();
  for (int peer = 0; peer < 4; ++peer) {
    h.issue(MOESCOPE_COMM_SEND, "ncclSend", 100 * (peer + 1), nccl::kBfloat16, peer, -1, kComm,
            kStream);
    h.issue(MOESCOPE_COMM_RECV, "ncclRecv", 10 * (peer + 1), nccl::kBfloat16, peer, -1, kComm,
            kStream);
  }
  // NCCL launches grouped ops only at ncclGroupEnd: no event may precede it.
  EXPECT_TRUE(h.gpu.recorded_events().empty());
  h.recorder.group_end_before();
  h.recorder.group_end_after(nccl::kSuccess);
  auto events = h.gpu.recorded_events();
  ASSERT_EQ(events.size(), 2u);  // one start/end pair for the group's one stream
  h.gpu.complete(events[0], 2'000'000);
  h.gpu.complete(events[1], 2'400'000);
  EXPECT_EQ(h.tracker.poll(), 1u);  // one pending entry carrying all eight ops
  ASSERT_EQ(h.ops.size(), 8u);
  uint64_t group = h.ops[0].group_id;
  EXPECT_NE(group, 0u);
  for (size_t i = 0; i < 8; ++i) {
    const moescope_comm_op_info& op = h.ops[i];
    EXPECT_EQ(op.group_id, group);
    EXPECT_EQ(op.sequence, i);
    EXPECT_EQ(op.kind, i % 2 == 0 ? MOESCOPE_COMM_SEND : MOESCOPE_COMM_RECV);
    EXPECT_EQ(op.peer, static_cast<int>(i / 2));
    uint64_t count = (i % 2 == 0 ? 100 : 10) * (i / 2 + 1);
    EXPECT_EQ(op.count, count);
    EXPECT_EQ(op.bytes, 2 * count);
    EXPECT_EQ(op.device, 2);
    EXPECT_NEAR(static_cast<double>(op.start_ns), 2'000'000.0, 200.0);
    EXPECT_NEAR(static_cast<double>(op.end_ns), 2'400'000.0, 200.0);
  }
  // The next group gets a new id; ops after it are ungrouped again.
  h.recorder.group_start();
  h.issue(MOESCOPE_COMM_SEND, "ncclSend", 1, nccl::kInt8, 1, -1, kComm, kStream);
  h.recorder.group_end_before();
  h.recorder.group_end_after(nccl::kSuccess);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 1, nccl::kInt8, -1, -1, kComm, kStream);
  h.tracker.drain();
  ASSERT_EQ(h.ops.size(), 10u);
  EXPECT_NE(h.ops[8].group_id, 0u);
  EXPECT_NE(h.ops[8].group_id, group);
  EXPECT_EQ(h.ops[9].group_id, 0u);
}

TEST(NcclCompletion, NestedGroupsLaunchAtTheOutermostEnd) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.recorder.group_start();
  h.recorder.group_start();
  h.issue(MOESCOPE_COMM_SEND, "ncclSend", 8, nccl::kFloat32, 1, -1, kComm, kStream);
  h.recorder.group_end_before();
  h.recorder.group_end_after(nccl::kSuccess);
  EXPECT_TRUE(h.gpu.recorded_events().empty());
  h.issue(MOESCOPE_COMM_RECV, "ncclRecv", 8, nccl::kFloat32, 1, -1, kComm, kStream);
  h.recorder.group_end_before();
  h.recorder.group_end_after(nccl::kSuccess);
  EXPECT_EQ(h.gpu.recorded_events().size(), 2u);
  h.tracker.drain();
  ASSERT_EQ(h.ops.size(), 2u);
  EXPECT_EQ(h.ops[0].group_id, h.ops[1].group_id);
}

TEST(NcclCompletion, GroupOnTwoStreamsTimesEachStreamSeparately) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.recorder.group_start();
  h.issue(MOESCOPE_COMM_SEND, "ncclSend", 8, nccl::kFloat32, 1, -1, kComm, kStream);
  h.issue(MOESCOPE_COMM_RECV, "ncclRecv", 8, nccl::kFloat32, 1, -1, kComm, kOtherStream);
  h.recorder.group_end_before();
  h.recorder.group_end_after(nccl::kSuccess);
  auto events = h.gpu.recorded_events();
  ASSERT_EQ(events.size(), 4u);  // start A, start B, end A, end B
  for (auto* event : events) {
    h.gpu.complete(event, event->stream == kStream ? 2'000'000 : 7'000'000);
  }
  EXPECT_EQ(h.tracker.poll(), 2u);
  ASSERT_EQ(h.ops.size(), 2u);
  for (const auto& op : h.ops) {
    double expected = op.stream == 0x5000u ? 2'000'000.0 : 7'000'000.0;
    EXPECT_NEAR(static_cast<double>(op.end_ns), expected, 200.0);
  }
}

TEST(NcclCompletion, OpOnACapturingStreamIsRecordedWithoutGpuTimes) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.gpu.capturing_streams.insert(kStream);
  h.issue(MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", 64, nccl::kFloat16, -1, -1, kComm, kStream);
  EXPECT_TRUE(h.gpu.recorded_events().empty());  // no event may enter the user's graph
  ASSERT_EQ(h.ops.size(), 1u);                   // emitted at once
  EXPECT_EQ(h.ops[0].start_ns, h.ops[0].enqueue_ns);
  EXPECT_EQ(h.ops[0].end_ns, 0u);
  EXPECT_EQ(h.ops[0].bytes, 128u);
  // The trace says once what that means for the graph's replays.
  ASSERT_EQ(h.notes.size(), 1u);
  EXPECT_EQ(h.notes[0].rfind("NCCL ops captured into a CUDA graph: recorded once, at capture", 0),
            0u)
      << h.notes[0];
  h.issue(MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", 64, nccl::kFloat16, -1, -1, kComm, kStream);
  EXPECT_EQ(h.notes.size(), 1u);
}

// Another thread may be capturing a CUDA graph in global mode: the interposer's CUDA calls on
// the program's thread run in relaxed mode (so they cannot invalidate it), and the program's
// own mode is restored afterwards.
TEST(NcclCompletion, MarksRunInRelaxedCaptureModeAndRestoreTheProgramsMode) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  // Two marks (start, end), each: relaxed (2), then the program's global mode (0) again.
  EXPECT_EQ(h.gpu.capture_modes_set, (std::vector<int>{2, 0, 2, 0}));
  EXPECT_EQ(h.gpu.capture_mode, 0);
  EXPECT_EQ(h.gpu.reference_records, 0);  // and no synchronization there
}

// An op that waits for the GPU is reported entered (the recorder writes a collective_open record
// for one still pending a second later: a rank hung in NCCL); its completion is its emit. An op
// written at once (no CUDA runtime) is never reported entered.
TEST(NcclCompletion, AnOpWaitingForTheGpuIsReportedEntered) {
  Harness h;
  h.queries.comms[kComm] = {1, 4, 0};
  h.recorder.comm_created(kComm, 77, 1, 4, "ncclCommInitRank", h.host_now);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 1024, nccl::kFloat32, -1, -1, kComm, kStream);
  ASSERT_EQ(h.entered.size(), 1u);
  EXPECT_EQ(h.entered[0].comm_id, 77u);
  EXPECT_EQ(h.entered[0].sequence, 0u);
  EXPECT_EQ(h.entered[0].kind, MOESCOPE_COMM_ALL_REDUCE);
  EXPECT_EQ(h.entered[0].bytes, 4096u);
  EXPECT_EQ(h.entered[0].rank, 1);
  EXPECT_EQ(h.entered[0].num_ranks, 4);
  EXPECT_EQ(h.emitted(), 0u);  // still on the GPU
  auto events = h.gpu.recorded_events();
  h.gpu.complete(events[0], 3'000'000);
  h.gpu.complete(events[1], 3'500'000);
  EXPECT_EQ(h.tracker.poll(), 1u);
  EXPECT_EQ(h.entered.size(), 1u);

  Harness at_once;
  at_once.gpu.runtime_present = false;
  at_once.queries.comms[kComm] = {3, 8, -1};
  at_once.issue(MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 10, nccl::kInt64, -1, 5, kComm, kStream);
  EXPECT_EQ(at_once.emitted(), 1u);
  EXPECT_TRUE(at_once.entered.empty());
}

TEST(NcclCompletion, WithoutACudaRuntimeOpsAreEmittedAtOnce) {
  Harness h;
  h.gpu.runtime_present = false;
  h.queries.comms[kComm] = {3, 8, -1};
  h.issue(MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 10, nccl::kInt64, -1, 5, kComm, kStream);
  ASSERT_EQ(h.ops.size(), 1u);
  EXPECT_EQ(h.ops[0].end_ns, 0u);
  EXPECT_EQ(h.ops[0].root, 5);
  EXPECT_EQ(h.ops[0].rank, 3);
  EXPECT_EQ(h.ops[0].num_ranks, 8);
  EXPECT_EQ(h.ops[0].device, -1);
  EXPECT_EQ(h.gpu.created, 0);
}

TEST(NcclCompletion, AFailedEventGivesAnUnknownEnd) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  auto events = h.gpu.recorded_events();
  ASSERT_EQ(events.size(), 2u);
  h.gpu.fail(events[1]);
  EXPECT_EQ(h.tracker.poll(), 1u);
  ASSERT_EQ(h.ops.size(), 1u);
  EXPECT_EQ(h.ops[0].end_ns, 0u);
  EXPECT_EQ(h.ops[0].start_ns, h.ops[0].enqueue_ns);
}

TEST(NcclCompletion, DrainEmitsOpsStillOnTheGpuWithUnknownEnd) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  auto events = h.gpu.recorded_events();
  h.gpu.complete(events[0], 1'500'000);
  h.gpu.complete(events[1], 1'600'000);
  EXPECT_EQ(h.tracker.pending(), 2u);
  h.tracker.drain();
  EXPECT_EQ(h.tracker.pending(), 0u);
  ASSERT_EQ(h.ops.size(), 2u);
  EXPECT_NEAR(static_cast<double>(h.ops[0].end_ns), 1'600'000.0, 200.0);
  EXPECT_EQ(h.ops[1].end_ns, 0u);
  EXPECT_EQ(h.ops[1].sequence, 1u);
}

TEST(NcclCompletion, DrainNotesHowManyOpsHadNotFinished) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  for (int i = 0; i < 3; ++i) {
    h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  }
  auto events = h.gpu.recorded_events();
  h.gpu.complete(events[1], 1'500'000);  // the first op's end
  h.tracker.drain();
  ASSERT_EQ(h.ops.size(), 3u);
  EXPECT_NE(h.ops[0].end_ns, 0u);
  EXPECT_EQ(h.ops[1].end_ns, 0u);
  EXPECT_EQ(h.ops[2].end_ns, 0u);
  ASSERT_EQ(h.notes.size(), 1u);
  EXPECT_EQ(h.notes[0].rfind("2 NCCL ops had not finished on the GPU", 0), 0u) << h.notes[0];
  h.tracker.drain();  // nothing left: no second note
  EXPECT_EQ(h.notes.size(), 1u);
}

// A program that never synchronizes: the host runs far ahead of the GPU.
TEST(NcclCompletion, WithoutSynchronizationTheQueueStaysBoundedAndCompletedOpsAreEmitted) {
  NcclCompletionTracker::Options options;
  options.max_pending = 4;
  Harness h(options);
  h.queries.comms[kComm] = {0, 2, 0};
  for (int i = 0; i < 6; ++i) {
    h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  }
  EXPECT_EQ(h.tracker.pending(), 4u);
  ASSERT_EQ(h.ops.size(), 2u);  // beyond the bound: at once, without GPU times
  EXPECT_EQ(h.ops[0].sequence, 4u);
  EXPECT_EQ(h.ops[0].end_ns, 0u);
  EXPECT_EQ(h.ops[0].start_ns, h.ops[0].enqueue_ns);
  ASSERT_EQ(h.notes.size(), 1u);  // once, not per op
  EXPECT_NE(h.notes[0].find("4 NCCL ops wait for the GPU"), std::string::npos) << h.notes[0];

  auto events = h.gpu.recorded_events();
  // Start and end of the 4 queued ops, then of the 2 beyond the bound (given back at once).
  ASSERT_EQ(events.size(), 12u);
  h.gpu.complete(events[0], 2'000'000);
  h.gpu.complete(events[1], 2'100'000);
  h.gpu.complete(events[2], 2'200'000);
  h.gpu.complete(events[3], 2'300'000);
  EXPECT_EQ(h.tracker.poll(), 2u);  // what completed is emitted
  EXPECT_EQ(h.tracker.pending(), 2u);
  EXPECT_NEAR(static_cast<double>(h.ops[3].end_ns), 2'300'000.0, 200.0);
  // The third op's end was asked about once; the fourth, behind it on the stream, not at all.
  EXPECT_EQ(events[5]->queries, 1);
  EXPECT_EQ(events[7]->queries, 0);

  // Drained to half the bound: a new overflow is noted again.
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  EXPECT_EQ(h.notes.size(), 2u);
}

TEST(NcclCompletion, EachPollQueriesOnlyTheFirstPendingOpOfEachStream) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  for (int i = 0; i < 3; ++i) {
    h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  }
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm,
          kOtherStream);
  EXPECT_EQ(h.tracker.poll(), 0u);
  auto events = h.gpu.recorded_events();
  int queries = 0;
  for (auto* event : events) queries += event->queries;
  EXPECT_EQ(queries, 2);  // one per stream
  EXPECT_EQ(events[1]->queries, 1);
  EXPECT_EQ(events[7]->queries, 1);
  // Out of order on another stream is fine: the other stream's op completes first.
  h.gpu.complete(events[6], 1'100'000);
  h.gpu.complete(events[7], 1'200'000);
  EXPECT_EQ(h.tracker.poll(), 1u);
  EXPECT_EQ(h.ops[0].stream, 0x6000u);
}

TEST(NcclCompletion, AnAbortedCommunicatorsPendingOpsAreWrittenAsAbortedWithoutQueries) {
  Harness h;
  const nccl::CommHandle other = fake_comm(0xC1);
  h.queries.comms[kComm] = {0, 2, 0};
  h.queries.comms[other] = {0, 2, 0};
  h.recorder.comm_created(kComm, 41, 0, 2, "ncclCommInitRank", h.host_now);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.issue(MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, other,
          kOtherStream);
  auto events = h.gpu.recorded_events();
  ASSERT_EQ(events.size(), 6u);

  h.recorder.comm_aborting(kComm);  // before the real ncclCommAbort
  ASSERT_EQ(h.ops.size(), 2u);
  for (const auto& op : h.ops) {
    EXPECT_EQ(op.comm_id, 41u);
    EXPECT_EQ(op.end_ns, 0u);
    EXPECT_EQ(op.start_ns, op.enqueue_ns);
  }
  ASSERT_EQ(h.notes.size(), 1u);
  EXPECT_NE(h.notes[0].find("ncclCommAbort: 2 NCCL ops of communicator 0000000000000029"),
            std::string::npos)
      << h.notes[0];
  EXPECT_NE(h.notes[0].find("aborted (end = 0)"), std::string::npos) << h.notes[0];
  EXPECT_EQ(h.tracker.pending(), 1u);  // the other communicator's op is untouched

  // Whatever the dead comm's stream does later, its events are never asked about again.
  for (auto* event : events) h.gpu.complete(event, 3'000'000);
  EXPECT_EQ(h.tracker.poll(), 1u);
  h.tracker.drain();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(events[i]->queries, 0) << "event " << i;
  EXPECT_EQ(h.gpu.destroyed, 0);  // nor destroyed: leaked behind the aborted kernels
  ASSERT_EQ(h.ops.size(), 3u);
  EXPECT_NE(h.ops[2].end_ns, 0u);

  // The interposer's call after the real abort: the comm closes, nothing is written twice.
  h.recorder.comm_destroyed(kComm, "ncclCommAbort", h.host_now);
  EXPECT_EQ(h.ops.size(), 3u);
  EXPECT_EQ(h.notes.size(), 1u);
  ASSERT_EQ(h.comm_events.size(), 2u);
  EXPECT_EQ(h.comm_events[1].kind, MOESCOPE_COMM_DESTROY);
}

TEST(NcclCompletion, AnAbortReportedOnlyAfterTheRealCallStillWritesThePendingOps) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.recorder.comm_destroyed(kComm, "ncclCommAbort", h.host_now);
  ASSERT_EQ(h.ops.size(), 1u);
  EXPECT_EQ(h.ops[0].end_ns, 0u);
  EXPECT_EQ(h.tracker.pending(), 0u);
  ASSERT_EQ(h.notes.size(), 1u);
  // A plain destroy leaves pending ops to complete normally.
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.recorder.comm_destroyed(kComm, "ncclCommDestroy", h.host_now);
  EXPECT_EQ(h.tracker.pending(), 1u);
}

TEST(NcclCompletion, AnOpOnACommunicatorNcclKnowsNothingAboutIsStillRecorded) {
  Harness h;  // no answers: created before recording and NCCL cannot say more (or not yet)
  const nccl::CommHandle stranger = fake_comm(0xBEEF);
  h.issue(MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 8, nccl::kInt32, -1, 0, stranger, kStream);
  ASSERT_EQ(h.ops.size(), 1u);  // at once: without a device there are no GPU events
  EXPECT_TRUE(h.gpu.recorded_events().empty());
  EXPECT_EQ(h.ops[0].rank, -1);
  EXPECT_EQ(h.ops[0].num_ranks, -1);
  EXPECT_EQ(h.ops[0].device, -1);
  EXPECT_EQ(h.ops[0].bytes, 32u);
  EXPECT_EQ(h.ops[0].root, 0);
  EXPECT_NE(h.ops[0].comm_id, 0u);
  EXPECT_EQ(h.ops[0].end_ns, 0u);
  // Once NCCL can answer (a non-blocking comm finished initializing), later ops get them.
  h.queries.comms[stranger] = {3, 8, 1};
  h.issue(MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 8, nccl::kInt32, -1, 0, stranger, kStream);
  h.tracker.drain();
  ASSERT_EQ(h.ops.size(), 2u);
  EXPECT_EQ(h.ops[1].rank, 3);
  EXPECT_EQ(h.ops[1].num_ranks, 8);
  EXPECT_EQ(h.ops[1].device, 1);
  EXPECT_EQ(h.ops[1].comm_id, h.ops[0].comm_id);
  EXPECT_EQ(h.ops[1].sequence, 1u);
}

TEST(NcclCompletion, TheReferenceIsRenewedSoFloatMillisecondsStayPrecise) {
  NcclCompletionTracker::Options options;
  options.reference_lifetime_ns = 1'000'000;
  Harness h(options);
  h.queries.comms[kComm] = {0, 2, 0};
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  EXPECT_EQ(h.tracker.poll(), 0u);  // the poller makes the device's first reference
  EXPECT_EQ(h.gpu.reference_records, 1);
  h.host_now += 500'000;
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  EXPECT_EQ(h.gpu.reference_records, 1);  // still fresh: the op is measured from it
  auto early = h.gpu.recorded_events();
  ASSERT_EQ(early.size(), 4u);
  // One stream: the GPU finishes the ops in order (the first two long before the third).
  for (int i = 0; i < 4; ++i) h.gpu.complete(early[i], 1'000'000 + 100'000 * i);
  EXPECT_EQ(h.tracker.poll(), 2u);
  h.host_now += 3'600'000'000'000ull;  // an hour later
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  EXPECT_EQ(h.gpu.reference_records, 1);  // stale, and never renewed on the issuing thread
  auto events = h.gpu.recorded_events();
  ASSERT_EQ(events.size(), 6u);
  uint64_t start = h.host_now + 1'234'567;
  h.gpu.complete(events[4], start);
  h.gpu.complete(events[5], start + 777);
  h.host_now = start + 2'000'000;  // the poller runs after the op completed
  EXPECT_EQ(h.tracker.poll(), 1u);
  EXPECT_EQ(h.gpu.reference_records, 2);  // renewed by the poller, measured back from it
  ASSERT_EQ(h.ops.size(), 3u);
  EXPECT_EQ(h.ops[2].sequence, 2u);
  // Against a reference an hour old a float would be off by hundreds of microseconds.
  EXPECT_NEAR(static_cast<double>(h.ops[2].start_ns), static_cast<double>(start), 200.0);
  EXPECT_NEAR(static_cast<double>(h.ops[2].end_ns), static_cast<double>(start + 777), 200.0);
}

TEST(NcclCompletion, FailedCallsAreNotRecordedAsOps) {
  Harness h;
  h.queries.comms[kComm] = {0, 2, 0};
  h.issue(MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 4, nccl::kFloat32, -1, 99, kComm, kStream,
          nccl::kInvalidArgument);
  h.tracker.drain();
  EXPECT_TRUE(h.ops.empty());
  h.recorder.group_start();
  h.issue(MOESCOPE_COMM_SEND, "ncclSend", 4, nccl::kFloat32, 1, -1, kComm, kStream);
  h.recorder.group_end_before();
  h.recorder.group_end_after(nccl::kRemoteError);
  h.tracker.drain();
  EXPECT_TRUE(h.ops.empty());
}

// Waits up to 5 s for the poller thread to emit `count` ops (nothing else polls).
bool poller_emitted(Harness& h, size_t count) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (h.emitted() < count && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return h.emitted() == count;
}

// Lets the fake GPU finish the one op just issued (start 1.1 ms, end 1.2 ms on the host clock);
// false if the op did not record its two events.
bool finish_issued_op(Harness& h) {
  auto events = h.gpu.recorded_events();
  if (events.size() != 2u) return false;
  h.gpu.complete(events[0], 1'100'000);
  h.gpu.complete(events[1], 1'200'000);
  return true;
}

TEST(NcclCompletion, ThePollerThreadEmitsCompletedOps) {
  NcclCompletionTracker::Options options;
  options.poll_interval_ms = 1;
  Harness h(options);
  h.queries.comms[kComm] = {0, 2, 1};
  h.tracker.start_poller();
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  ASSERT_TRUE(finish_issued_op(h));
  poller_emitted(h, 1);
  h.tracker.stop_poller();
  ASSERT_EQ(h.emitted(), 1u);
  EXPECT_EQ(h.gpu.current, 1);  // the poller made the ops' device current first
}

TEST(NcclCompletion, AForkedChildForgetsThePollerAndPendingOpsWithoutHanging) {
  NcclCompletionTracker::Options options;
  options.poll_interval_ms = 1;
  Harness h(options);
  h.queries.comms[kComm] = {0, 2, 0};
  h.tracker.start_poller();
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  ASSERT_EQ(h.tracker.pending(), 1u);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // What the shim's fork handler does, then what its exit path does.
    h.tracker.abandon_after_fork();
    h.tracker.stop_poller();  // must not join the parent's thread
    h.tracker.drain();
    _exit(h.tracker.pending() == 0 && h.emitted() == 0 ? 0 : 3);
  }
  const std::optional<int> waited = wait_for_child(child, 5000);
  ASSERT_TRUE(waited.has_value()) << "the forked child hung";
  const int status = *waited;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  h.tracker.stop_poller();
  EXPECT_EQ(h.tracker.pending(), 1u);  // the parent still owns its op
}

TEST(NcclCompletion, ThePollerGateStartsThePollerAgainForTheNextRecording) {
  NcclCompletionTracker::Options options;
  options.poll_interval_ms = 1;
  Harness h(options);
  h.queries.comms[kComm] = {0, 2, 0};
  NcclPollerGate gate(h.tracker);
  EXPECT_FALSE(h.tracker.poller_running());
  gate.op_issued(1);
  EXPECT_TRUE(h.tracker.poller_running());
  gate.shut_down(1);  // the capture stops
  EXPECT_FALSE(h.tracker.poller_running());
  gate.op_issued(1);  // a late op of the stopped recording does not restart it
  EXPECT_FALSE(h.tracker.poller_running());

  // The next recording: the poller runs again and emits a completed op by itself.
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  gate.op_issued(2);
  EXPECT_TRUE(h.tracker.poller_running());
  ASSERT_TRUE(finish_issued_op(h));
  EXPECT_TRUE(poller_emitted(h, 1));
  EXPECT_NEAR(static_cast<double>(h.ops[0].end_ns), 1'200'000.0, 200.0);
  gate.shut_down(2);
  EXPECT_FALSE(h.tracker.poller_running());
}

TEST(NcclCompletion, ThePollerGateStartsAPollerInAForkedChildThatRecords) {
  NcclCompletionTracker::Options options;
  options.poll_interval_ms = 1;
  Harness h(options);
  h.queries.comms[kComm] = {0, 2, 0};
  NcclPollerGate gate(h.tracker);
  gate.op_issued(1);
  ASSERT_TRUE(h.tracker.poller_running());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // What the shim's fork handler does; then the child's own recording issues an op.
    h.tracker.abandon_after_fork();
    gate.after_fork_in_child();
    bool stopped_after_fork = !h.tracker.poller_running();
    h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
    gate.op_issued(3);
    bool restarted = h.tracker.poller_running();
    if (!finish_issued_op(h)) _exit(4);
    bool emitted = poller_emitted(h, 1);
    gate.shut_down(3);
    _exit(!stopped_after_fork ? 3 : !restarted ? 5 : !emitted ? 6 : 0);
  }
  const std::optional<int> waited = wait_for_child(child, 10000);
  ASSERT_TRUE(waited.has_value()) << "the forked child hung";
  const int status = *waited;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: poller still seen after fork, 5: not restarted, "
                                       "6: the child's poller emitted nothing";
  EXPECT_TRUE(h.tracker.poller_running());  // the parent's poller is untouched
  gate.shut_down(1);
}

TEST(NcclCompletion, UnknownCommunicatorsAreAskedAboutLazily) {
  Harness h;
  h.queries.comms[kComm] = {2, 4, 3};  // created before we were watching
  h.issue(MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 4, nccl::kFloat32, -1, -1, kComm, kStream);
  h.tracker.drain();
  ASSERT_EQ(h.ops.size(), 1u);
  EXPECT_EQ(h.ops[0].rank, 2);
  EXPECT_EQ(h.ops[0].num_ranks, 4);
  EXPECT_EQ(h.ops[0].device, 3);
  EXPECT_NE(h.ops[0].comm_id, 0u);
  h.recorder.comm_destroyed(fake_comm(0xDEAD), "ncclCommDestroy", h.host_now);
  EXPECT_TRUE(h.comm_events.empty());  // never seen: nothing to close
  h.recorder.comm_destroyed(kComm, "ncclCommDestroy", h.host_now);
  ASSERT_EQ(h.comm_events.size(), 1u);
  EXPECT_EQ(h.comm_events[0].kind, MOESCOPE_COMM_DESTROY);
  EXPECT_EQ(h.comm_events[0].comm_id, h.ops[0].comm_id);
  EXPECT_EQ(h.comm_events[0].sequence, 1u);  // ops issued on it
}

TEST(NcclCompletion, CommIdsAgreeAcrossRanks) {
  nccl::UniqueId id{};
  std::memcpy(id.internal, "rendezvous-42", 13);
  nccl::UniqueId other = id;
  other.internal[100] = 1;
  EXPECT_EQ(NcclOpRecorder::comm_id_of(id), NcclOpRecorder::comm_id_of(id));
  EXPECT_NE(NcclOpRecorder::comm_id_of(id), NcclOpRecorder::comm_id_of(other));

  // Two ranks split the same parent: same color -> same child id, in call order.
  Harness rank0, rank1;
  nccl::CommHandle parent0 = fake_comm(0x100), parent1 = fake_comm(0x200);
  rank0.recorder.comm_created(parent0, NcclOpRecorder::comm_id_of(id), 0, 2, "init", 0);
  rank1.recorder.comm_created(parent1, NcclOpRecorder::comm_id_of(id), 1, 2, "init", 0);
  uint64_t first0 = rank0.recorder.next_split_id(parent0, 3);
  uint64_t first1 = rank1.recorder.next_split_id(parent1, 3);
  EXPECT_EQ(first0, first1);
  EXPECT_NE(rank0.recorder.next_split_id(parent0, 3), first0);
  EXPECT_NE(rank1.recorder.next_split_id(parent1, 4), first1);
}

TEST(NcclCompletion, OpBytes) {
  std::vector<uint64_t> splits;
  EXPECT_EQ(NcclOpRecorder::op_bytes(MOESCOPE_COMM_ALL_TO_ALL, 16, nccl::kInt32, 4, &splits), 256u);
  EXPECT_EQ(splits, (std::vector<uint64_t>{64, 64, 64, 64}));
  EXPECT_EQ(NcclOpRecorder::op_bytes(MOESCOPE_COMM_REDUCE_SCATTER, 128, nccl::kFloat16, 4, nullptr),
            1024u);
  EXPECT_EQ(NcclOpRecorder::op_bytes(MOESCOPE_COMM_ALL_GATHER, 256, nccl::kBfloat16, 4, nullptr),
            512u);
  EXPECT_EQ(NcclOpRecorder::op_bytes(MOESCOPE_COMM_ALL_REDUCE, 3, nccl::kFloat8e4m3, 4, nullptr),
            3u);
  EXPECT_EQ(NcclOpRecorder::op_bytes(MOESCOPE_COMM_ALL_REDUCE, 3, 77, 4, nullptr), 0u);
}

}  // namespace
}  // namespace moescope::testing
