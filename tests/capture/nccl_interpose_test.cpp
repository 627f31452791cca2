// NCCL interposition end to end on CPU: nccl_interpose_program (real nccl.h, linked against the
// test-only stand-in library) runs with and without libmoescope_inject.so preloaded. Every call
// must reach the stand-in with exactly the same arguments, return exactly the stand-in's
// result, and be recorded in the trace with the right fields. Also: the real libnccl.so.2's
// host-only calls through the shim, and our NCCL ABI header against the real nccl.h.
#include <gtest/gtest.h>
#include <nccl.h>

#include <link.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../profiler/trace_test_reading.h"
#include "moescope/recorder.h"
#include "nccl_abi.h"

namespace moescope::testing {
namespace {

namespace trace = moescope::trace;
namespace abi = moescope::inject::nccl;

// ---- our ABI header against the real one -------------------------------------------------
static_assert(sizeof(abi::UniqueId) == sizeof(ncclUniqueId));
static_assert(sizeof(abi::Result) == sizeof(ncclResult_t));
static_assert(sizeof(abi::DataType) == sizeof(ncclDataType_t));
static_assert(sizeof(abi::RedOp) == sizeof(ncclRedOp_t));
static_assert(abi::kInProgress == static_cast<int>(ncclInProgress));
static_assert(abi::kInvalidArgument == static_cast<int>(ncclInvalidArgument));
static_assert(abi::kSplitNoColor == NCCL_SPLIT_NOCOLOR);

TEST(NcclAbi, DataTypesMatchTheRealHeaderAndHaveTheirSizes) {
  struct Expected {
    ncclDataType_t real;
    abi::DataType ours;
    size_t bytes;
  };
  const Expected types[] = {
      {ncclInt8, abi::kInt8, 1},
      {ncclUint8, abi::kUint8, 1},
      {ncclInt32, abi::kInt32, 4},
      {ncclUint32, abi::kUint32, 4},
      {ncclInt64, abi::kInt64, 8},
      {ncclUint64, abi::kUint64, 8},
      {ncclFloat16, abi::kFloat16, 2},
      {ncclFloat32, abi::kFloat32, 4},
      {ncclFloat64, abi::kFloat64, 8},
      {ncclBfloat16, abi::kBfloat16, 2},
      {ncclFloat8e4m3, abi::kFloat8e4m3, 1},
      {ncclFloat8e5m2, abi::kFloat8e5m2, 1},
  };
  for (const Expected& type : types) {
    EXPECT_EQ(static_cast<int>(type.real), static_cast<int>(type.ours));
    EXPECT_EQ(abi::data_type_bytes(type.ours), type.bytes) << static_cast<int>(type.ours);
  }
  EXPECT_EQ(static_cast<int>(ncclNumTypes), static_cast<int>(abi::kNumDataTypes));
}

// ---- running the program -----------------------------------------------------------------
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// Under AddressSanitizer its runtime must come first in the preload list of the child.
std::string preload_list(const std::string& library) {
  std::string asan_runtime;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libasan.so") != std::string::npos) {
          *static_cast<std::string*>(out) = name;
          return 1;
        }
        return 0;
      },
      &asan_runtime);
  return asan_runtime.empty() ? library : asan_runtime + ":" + library;
}

struct ProgramRun {
  int exit_code = -1;
  std::string stdout_text;
  std::string log_text;
};

// Runs `program` with `environment` ("A=1 B=2 ") and `arguments`, both shell-quoted by the
// caller.
ProgramRun run_program(const std::string& program, const std::string& environment,
                       const std::string& log_path, const std::string& arguments = "") {
  std::string out_path = temp_path("program.out");
  std::remove(log_path.c_str());
  std::string command = "env " + environment + " NCCL_STANDIN_LOG='" + log_path + "' '" + program +
                        "' " + arguments + " > '" + out_path + "' 2>&1";
  ProgramRun run;
  int status = std::system(command.c_str());
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.stdout_text = read_file(out_path);
  run.log_text = read_file(log_path);
  std::remove(out_path.c_str());
  std::remove(log_path.c_str());
  return run;
}

const std::vector<std::string>& expected_standin_log() {
  static const std::vector<std::string> lines = [] {
    std::vector<std::string> expected = {
        "GetUniqueId",
        "CommInitRank nranks=4 id=0104070a0d101316191c1f2225282b2e last=126 rank=1 -> comm#1",
        "AllReduce send=0x10000 recv=0x20000 count=1024 dtype=7 op=0 comm#1 stream=0x5000",
        "AllGather send=0x10000 recv=0x20000 count=256 dtype=9 comm#1 stream=0x5000",
        "ReduceScatter send=0x10000 recv=0x20000 count=128 dtype=6 op=2 comm#1 stream=0x5000",
        "Broadcast send=0x10000 recv=0x20000 count=64 dtype=4 root=2 comm#1 stream=0x5000",
        "Reduce send=0x10000 recv=0x20000 count=32 dtype=8 op=1 root=3 comm#1 stream=0x5000",
        "AlltoAll send=0x10000 recv=0x20000 count=16 dtype=2 comm#1 stream=0x5000",
        "GroupStart",
    };
    for (int peer = 0; peer < 4; ++peer) {
      char line[160];
      std::snprintf(line, sizeof(line),
                    "Send send=0x%x count=%d dtype=9 peer=%d comm#1 stream=0x6000",
                    0x30000 + 0x100 * peer, 10 * (peer + 1), peer);
      expected.push_back(line);
      std::snprintf(line, sizeof(line),
                    "Recv recv=0x%x count=%d dtype=9 peer=%d comm#1 stream=0x6000",
                    0x40000 + 0x100 * peer, 20 * (peer + 1), peer);
      expected.push_back(line);
    }
    for (const char* line :
         {"GroupEnd",
          "Broadcast send=0x10000 recv=0x20000 count=8 dtype=7 root=99 comm#1 stream=0x5000",
          "CommSplit comm#1 color=0 key=1 config=0x0 -> comm#2",
          "AllReduce send=0x10000 recv=0x20000 count=8 dtype=1 op=3 comm#2 stream=0x5000",
          "CommDestroy comm#2", "CommDestroy comm#1"}) {
      expected.push_back(line);
    }
    return expected;
  }();
  return lines;
}

// The recorded comm ops of `loaded` in enqueue order.
std::vector<trace::CommOpRecord> comm_ops_in(const LoadedTrace& loaded) {
  std::vector<trace::CommOpRecord> ops;
  for (const auto& record : loaded.of_kind(trace::RecordKind::kCommOp)) {
    ops.push_back(record.as<trace::CommOpRecord>());
  }
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.header.time < b.header.time; });
  return ops;
}

std::string name_in(const LoadedTrace& loaded, uint32_t id) {
  auto found = loaded.strings.find(id);
  return found == loaded.strings.end() ? "<no name>" : found->second;
}

// The name of the first instant of `loaded` that starts with `prefix` ("" when none).
std::string instant_starting_with(const LoadedTrace& loaded, const std::string& prefix) {
  for (const auto& record : loaded.of_kind(trace::RecordKind::kInstant)) {
    std::string name = name_in(loaded, record.header().name);
    if (name.rfind(prefix, 0) == 0) return name;
  }
  return "";
}

bool has_instant_in(const LoadedTrace& loaded, const std::string& text) {
  return instant_starting_with(loaded, text) == text;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class NcclInterposition : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plain_ = new ProgramRun(run_program(MOESCOPE_NCCL_PROGRAM, "", temp_path("plain.log")));
    trace_path_ = new std::string(temp_path("nccl_interposed.moetrace"));
    std::remove(trace_path_->c_str());
    shimmed_ = new ProgramRun(run_program(MOESCOPE_NCCL_PROGRAM,
                                          "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_LIBRARY) +
                                              "' MOESCOPE_OUTPUT='" + *trace_path_ + "'",
                                          temp_path("shimmed.log")));
    trace_ = new LoadedTrace(load_trace(*trace_path_));
  }
  static void TearDownTestSuite() {
    std::remove(trace_path_->c_str());
    delete plain_;
    delete shimmed_;
    delete trace_;
    delete trace_path_;
  }

  static std::vector<trace::CommOpRecord> comm_ops() { return comm_ops_in(*trace_); }
  static std::string name_of(uint32_t id) { return name_in(*trace_, id); }
  static bool has_instant(const std::string& text) { return has_instant_in(*trace_, text); }

  static inline ProgramRun* plain_ = nullptr;
  static inline ProgramRun* shimmed_ = nullptr;
  static inline LoadedTrace* trace_ = nullptr;
  static inline std::string* trace_path_ = nullptr;
};

TEST_F(NcclInterposition, TheStandInSeesTheExpectedCallsWithoutTheShim) {
  ASSERT_EQ(plain_->exit_code, 0) << plain_->stdout_text;
  EXPECT_EQ(lines_of(plain_->log_text), expected_standin_log());
}

TEST_F(NcclInterposition, EveryCallIsForwardedWithExactlyItsArguments) {
  ASSERT_EQ(shimmed_->exit_code, 0) << shimmed_->stdout_text;
  EXPECT_EQ(lines_of(shimmed_->log_text), expected_standin_log());
}

TEST_F(NcclInterposition, EveryCallReturnsExactlyTheLibrarysResult) {
  // The same stdout with and without the shim: results, and the stand-in's version 29999.
  EXPECT_EQ(shimmed_->stdout_text, plain_->stdout_text);
  EXPECT_NE(shimmed_->stdout_text.find("version 29999"), std::string::npos);
  EXPECT_NE(shimmed_->stdout_text.find("ncclBroadcast(root 99) -> 4"), std::string::npos);
  EXPECT_NE(shimmed_->stdout_text.find("ncclAllReduce -> 0"), std::string::npos);
}

TEST_F(NcclInterposition, CollectivesAreRecordedWithTheirFields) {
  ASSERT_TRUE(trace_->opened);
  ASSERT_TRUE(trace_->errors.empty());
  std::vector<trace::CommOpRecord> ops = comm_ops();
  ASSERT_EQ(ops.size(), 1u + 6u + 8u + 1u + 1u + 2u);  // init, 6, 8 p2p, split, sub op, 2 destroys

  const trace::CommOpRecord& init = ops[0];
  EXPECT_EQ(init.kind, MOESCOPE_COMM_INIT);
  EXPECT_EQ(name_of(init.header.name), "ncclCommInitRank");
  EXPECT_EQ(init.rank, 1);
  EXPECT_EQ(init.num_ranks, 4);
  EXPECT_EQ(init.device, 5);
  uint64_t comm_id = init.comm_id;
  EXPECT_NE(comm_id, 0u);

  struct Expected {
    uint32_t kind;
    const char* name;
    uint64_t count;
    uint32_t dtype;
    uint64_t bytes;
    int32_t root;
  };
  const Expected collectives[] = {
      {MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", 1024, 7, 4096, -1},
      {MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", 256, 9, 512, -1},
      {MOESCOPE_COMM_REDUCE_SCATTER, "ncclReduceScatter", 128, 6, 128 * 2 * 4, -1},
      {MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 64, 4, 512, 2},
      {MOESCOPE_COMM_REDUCE, "ncclReduce", 32, 8, 256, 3},
      {MOESCOPE_COMM_ALL_TO_ALL, "ncclAlltoAll", 16, 2, 256, -1},
  };
  for (size_t i = 0; i < 6; ++i) {
    const trace::CommOpRecord& op = ops[1 + i];
    const Expected& expected = collectives[i];
    SCOPED_TRACE(expected.name);
    EXPECT_EQ(op.kind, expected.kind);
    EXPECT_EQ(name_of(op.header.name), expected.name);
    EXPECT_EQ(op.count, expected.count);
    EXPECT_EQ(op.dtype, expected.dtype);
    EXPECT_EQ(op.bytes, expected.bytes);
    EXPECT_EQ(op.root, expected.root);
    EXPECT_EQ(op.peer, -1);
    EXPECT_EQ(op.comm_id, comm_id);
    EXPECT_EQ(op.rank, 1);
    EXPECT_EQ(op.num_ranks, 4);
    EXPECT_EQ(op.device, 5);
    EXPECT_EQ(op.stream, 0x5000u);
    EXPECT_EQ(op.sequence, i);
    EXPECT_EQ(op.group_id, 0u);
    // No CUDA runtime in this process: no GPU times, the enqueue time stands in for the start.
    EXPECT_EQ(op.end_time, 0u);
    EXPECT_EQ(op.start_time, op.header.time);
  }
  // All-to-all carries its per-rank split bytes.
  auto a2a_records = trace_->of_kind(trace::RecordKind::kCommOp);
  bool found_splits = false;
  for (const auto& record : a2a_records) {
    auto op = record.as<trace::CommOpRecord>();
    if (op.kind != MOESCOPE_COMM_ALL_TO_ALL) continue;
    ASSERT_EQ(op.num_splits, 4u);
    for (size_t rank = 0; rank < 4; ++rank) {
      EXPECT_EQ(record.tail<uint64_t>(sizeof(trace::CommOpRecord), rank), 64u);
    }
    found_splits = true;
  }
  EXPECT_TRUE(found_splits);
}

TEST_F(NcclInterposition, GroupedSendRecvShareAGroupAndKeepTheirPeers) {
  std::vector<trace::CommOpRecord> ops = comm_ops();
  ASSERT_GE(ops.size(), 15u);
  uint64_t group = ops[7].group_id;
  EXPECT_NE(group, 0u);
  for (size_t i = 0; i < 8; ++i) {
    const trace::CommOpRecord& op = ops[7 + i];
    bool is_send = i % 2 == 0;
    int peer = static_cast<int>(i / 2);
    EXPECT_EQ(op.kind, is_send ? MOESCOPE_COMM_SEND : MOESCOPE_COMM_RECV);
    EXPECT_EQ(name_of(op.header.name), is_send ? "ncclSend" : "ncclRecv");
    EXPECT_EQ(op.peer, peer);
    EXPECT_EQ(op.count, static_cast<uint64_t>((is_send ? 10 : 20) * (peer + 1)));
    EXPECT_EQ(op.bytes, 2 * op.count);
    EXPECT_EQ(op.group_id, group);
    EXPECT_EQ(op.stream, 0x6000u);
    EXPECT_EQ(op.sequence, 6 + i);
    EXPECT_EQ(op.comm_id, ops[0].comm_id);
  }
}

TEST_F(NcclInterposition, FailedCallIsNotAnOpButANote) {
  for (const auto& op : comm_ops()) EXPECT_NE(op.root, 99);
  EXPECT_TRUE(has_instant("ncclBroadcast failed (ncclResult 4)"));
}

TEST_F(NcclInterposition, SplitAndDestroyAreRecorded) {
  std::vector<trace::CommOpRecord> ops = comm_ops();
  ASSERT_EQ(ops.size(), 19u);
  const trace::CommOpRecord& split = ops[15];
  EXPECT_EQ(split.kind, MOESCOPE_COMM_INIT);
  EXPECT_EQ(name_of(split.header.name), "ncclCommSplit");
  EXPECT_NE(split.comm_id, ops[0].comm_id);
  EXPECT_EQ(split.rank, 1);  // the stand-in makes the key the child's rank
  EXPECT_EQ(split.num_ranks, 2);
  const trace::CommOpRecord& sub_op = ops[16];
  EXPECT_EQ(sub_op.comm_id, split.comm_id);
  EXPECT_EQ(sub_op.sequence, 0u);
  EXPECT_EQ(sub_op.dtype, 1u);
  EXPECT_EQ(ops[17].kind, MOESCOPE_COMM_DESTROY);
  EXPECT_EQ(ops[17].comm_id, split.comm_id);
  EXPECT_EQ(ops[18].kind, MOESCOPE_COMM_DESTROY);
  EXPECT_EQ(ops[18].comm_id, ops[0].comm_id);
  EXPECT_EQ(ops[18].sequence, 14u);  // 14 ops issued on it (the rejected one not counted)
}

TEST_F(NcclInterposition, TheTraceNamesTheInterposedNcclAndTheMissingDriver) {
  // Linked by the program: NCCL is in the global scope, found right after the shim.
  std::string note = instant_starting_with(*trace_, "NCCL 29999 interposed: /");
  EXPECT_TRUE(ends_with(note, "/libnccl_standin_for_tests.so (global scope)")) << note;
  // This machine has no libcuda.so.1: CUPTI is not enabled, and the trace says why.
  EXPECT_TRUE(has_instant("gpu capture off: no CUDA driver (libcuda.so.1 not found)"));
}

// A program that records windows of its run stops the recording and starts it again through
// the recorder's C API (which the shim's session does not see): the second trace must be as
// complete as the first, ops with their fields and the note naming the interposed NCCL.
TEST(NcclInterpositionRestart, TheSecondRecordingHasItsOpsAndTheVersionNote) {
  std::string first_path = temp_path("nccl_first.moetrace");
  std::string second_path = temp_path("nccl_second.moetrace");
  std::remove(first_path.c_str());
  std::remove(second_path.c_str());
  ProgramRun run = run_program(MOESCOPE_NCCL_PROGRAM,
                               "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_LIBRARY) +
                                   "' MOESCOPE_OUTPUT='" + first_path + "'",
                               temp_path("restart.log"), "--restart '" + second_path + "'");
  ASSERT_EQ(run.exit_code, 0) << run.stdout_text;
  ASSERT_NE(run.stdout_text.find("moescope_recorder_start -> 0"), std::string::npos)
      << run.stdout_text;
  LoadedTrace first = load_trace(first_path);
  LoadedTrace second = load_trace(second_path);
  std::remove(first_path.c_str());
  std::remove(second_path.c_str());
  ASSERT_TRUE(first.opened);
  ASSERT_TRUE(second.opened);
  EXPECT_TRUE(first.errors.empty());
  EXPECT_TRUE(second.errors.empty());

  std::vector<trace::CommOpRecord> before = comm_ops_in(first);
  ASSERT_EQ(before.size(), 2u);  // init, all-reduce
  EXPECT_EQ(before[0].kind, MOESCOPE_COMM_INIT);
  EXPECT_EQ(before[1].kind, MOESCOPE_COMM_ALL_REDUCE);
  EXPECT_NE(instant_starting_with(first, "NCCL 29999 interposed: "), "");
  uint64_t comm_id = before[0].comm_id;

  EXPECT_NE(instant_starting_with(second, "NCCL 29999 interposed: "), "");
  std::vector<trace::CommOpRecord> after = comm_ops_in(second);
  ASSERT_EQ(after.size(), 5u);  // all-gather, send, recv, broadcast, destroy
  struct Expected {
    uint32_t kind;
    const char* name;
    uint64_t count;
    uint64_t bytes;
    int32_t peer;
    int32_t root;
    uint64_t stream;
  };
  const Expected expected_ops[] = {
      {MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", 256, 512, -1, -1, 0x5000},
      {MOESCOPE_COMM_SEND, "ncclSend", 10, 20, 2, -1, 0x6000},
      {MOESCOPE_COMM_RECV, "ncclRecv", 20, 40, 2, -1, 0x6000},
      {MOESCOPE_COMM_BROADCAST, "ncclBroadcast", 64, 512, -1, 2, 0x5000},
  };
  for (size_t i = 0; i < 4; ++i) {
    const trace::CommOpRecord& op = after[i];
    const Expected& expected = expected_ops[i];
    SCOPED_TRACE(expected.name);
    EXPECT_EQ(op.kind, expected.kind);
    EXPECT_EQ(name_in(second, op.header.name), expected.name);
    EXPECT_EQ(op.count, expected.count);
    EXPECT_EQ(op.bytes, expected.bytes);
    EXPECT_EQ(op.peer, expected.peer);
    EXPECT_EQ(op.root, expected.root);
    EXPECT_EQ(op.stream, expected.stream);
    // The communicator created during the first recording is still known.
    EXPECT_EQ(op.comm_id, comm_id);
    EXPECT_EQ(op.rank, 1);
    EXPECT_EQ(op.num_ranks, 4);
    EXPECT_EQ(op.device, 5);
    EXPECT_EQ(op.sequence, 1 + i);  // the all-reduce of the first recording was 0
    EXPECT_EQ(op.end_time, 0u);     // no CUDA runtime here
  }
  EXPECT_NE(after[1].group_id, 0u);
  EXPECT_EQ(after[1].group_id, after[2].group_id);
  EXPECT_EQ(after[4].kind, MOESCOPE_COMM_DESTROY);
  EXPECT_EQ(after[4].comm_id, comm_id);
  EXPECT_EQ(after[4].sequence, 5u);
}

// libtorch_cuda ends some groups with ncclGroupSimulateEnd (collective time estimates): NCCL
// runs nothing, and the group is over. The op after it is an ordinary, ungrouped op, recorded
// at once (before the fix it sat in a phantom group that never ended and was never written);
// the simulated one is not an op but a note. A shrunk communicator is recorded like a split.
TEST(NcclInterpositionTorchPaths, SimulatedGroupEndsTheGroupAndShrinkMakesACommunicator) {
  std::string trace_path = temp_path("nccl_simulate.moetrace");
  std::remove(trace_path.c_str());
  ProgramRun plain =
      run_program(MOESCOPE_NCCL_PROGRAM, "", temp_path("simulate_plain.log"), "--simulate");
  ProgramRun run = run_program(MOESCOPE_NCCL_PROGRAM,
                               "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_LIBRARY) +
                                   "' MOESCOPE_OUTPUT='" + trace_path + "'",
                               temp_path("simulate.log"), "--simulate");
  ASSERT_EQ(run.exit_code, 0) << run.stdout_text;
  EXPECT_EQ(run.stdout_text, plain.stdout_text);
  EXPECT_EQ(lines_of(run.log_text), lines_of(plain.log_text));  // forwarded unchanged
  EXPECT_NE(run.log_text.find("GroupSimulateEnd sim_info=given"), std::string::npos)
      << run.log_text;
  EXPECT_NE(run.log_text.find("CommShrink comm#1 exclude=3..3 config=0x0 flags=0 -> comm#2"),
            std::string::npos)
      << run.log_text;
  LoadedTrace loaded = load_trace(trace_path);
  std::remove(trace_path.c_str());
  ASSERT_TRUE(loaded.opened);

  std::vector<trace::CommOpRecord> ops = comm_ops_in(loaded);
  ASSERT_EQ(ops.size(), 6u);  // init, all-reduce, shrink, all-gather, destroy x2
  EXPECT_EQ(ops[0].kind, MOESCOPE_COMM_INIT);
  const trace::CommOpRecord& after = ops[1];
  EXPECT_EQ(after.kind, MOESCOPE_COMM_ALL_REDUCE);
  EXPECT_EQ(after.count, 1024u);  // the real one, not the simulated 4096
  EXPECT_EQ(after.group_id, 0u);
  EXPECT_EQ(after.sequence, 0u);  // the simulated op never reached the other ranks
  EXPECT_TRUE(has_instant_in(
      loaded,
      "ncclGroupSimulateEnd: 1 NCCL ops simulated (estimated, not run): not recorded as ops"));

  const trace::CommOpRecord& shrink = ops[2];
  EXPECT_EQ(shrink.kind, MOESCOPE_COMM_INIT);
  EXPECT_EQ(name_in(loaded, shrink.header.name), "ncclCommShrink");
  EXPECT_NE(shrink.comm_id, ops[0].comm_id);
  EXPECT_EQ(shrink.rank, 1);       // asked of the new communicator (ncclCommUserRank)
  EXPECT_EQ(shrink.num_ranks, 3);  // 4 minus the excluded rank
  EXPECT_EQ(ops[3].kind, MOESCOPE_COMM_ALL_GATHER);
  EXPECT_EQ(ops[3].comm_id, shrink.comm_id);
  EXPECT_EQ(ops[3].group_id, 0u);
  EXPECT_EQ(ops[4].kind, MOESCOPE_COMM_DESTROY);
  EXPECT_EQ(ops[4].comm_id, shrink.comm_id);
  EXPECT_EQ(ops[5].kind, MOESCOPE_COMM_DESTROY);
  EXPECT_EQ(ops[5].sequence, 1u);
}

#ifdef MOESCOPE_REAL_NCCL_PROGRAM
// The trace at `trace_path` notes the real libnccl of `version`, found in `scope`; then removed.
void expect_real_nccl_noted(const std::string& trace_path, int version, const std::string& scope) {
  LoadedTrace loaded = load_trace(trace_path);
  ASSERT_TRUE(loaded.opened);
  std::string note =
      instant_starting_with(loaded, "NCCL " + std::to_string(version) + " interposed: ");
  EXPECT_NE(note.find("libnccl.so"), std::string::npos) << note;
  EXPECT_TRUE(ends_with(note, scope)) << note;
  std::remove(trace_path.c_str());
}

TEST(NcclRealLibrary, HostOnlyCallsGoThroughTheShimToTheRealNccl) {
  std::string trace_path = temp_path("nccl_real.moetrace");
  std::remove(trace_path.c_str());
  ProgramRun run = run_program(MOESCOPE_REAL_NCCL_PROGRAM,
                               "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_LIBRARY) +
                                   "' MOESCOPE_OUTPUT='" + trace_path + "'",
                               temp_path("real.log"));
  ASSERT_EQ(run.exit_code, 0) << run.stdout_text;
  int version_result = -1, version = -1, direct_result = -1, direct = -2, id_result = -1,
      id_filled = 0;
  ASSERT_EQ(std::sscanf(run.stdout_text.c_str(), "version %d %d direct %d %d unique_id %d %d",
                        &version_result, &version, &direct_result, &direct, &id_result, &id_filled),
            6)
      << run.stdout_text;
  EXPECT_EQ(version_result, 0);
  EXPECT_EQ(direct_result, 0);
  EXPECT_EQ(version, direct);  // the interposer returned the real library's answer
  EXPECT_GE(version, 22800);
  EXPECT_EQ(id_result, 0);
  EXPECT_EQ(id_filled, 1);
  // The call went through the shim, not straight to NCCL, and the trace says which NCCL.
  expect_real_nccl_noted(trace_path, direct, "(global scope)");
}

// The torch wheel's situation without Python: NCCL is a dependency of a library opened with
// RTLD_LOCAL after the shim started. Its callers bind to our ncclX (the global scope comes
// first) while dlsym(RTLD_NEXT) cannot see the real one: the interposer must find it anyway
// and answer exactly what the real library answers.
TEST(NcclRealLibrary, NcclInALocalScopeIsFoundAndAnswersAsWithoutTheShim) {
  std::string trace_path = temp_path("nccl_local.moetrace");
  std::remove(trace_path.c_str());
  const char* program = MOESCOPE_NCCL_LOCAL_SCOPE_PROGRAM;
  std::string arguments = std::string("local '") + MOESCOPE_NCCL_LOCAL_CALLER + "'";
  ProgramRun plain = run_program(program, "", temp_path("local_plain.log"), arguments);
  ProgramRun shimmed = run_program(program,
                                   "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_LIBRARY) +
                                       "' MOESCOPE_OUTPUT='" + trace_path + "'",
                                   temp_path("local_shimmed.log"), arguments);
  ASSERT_EQ(plain.exit_code, 0) << plain.stdout_text;
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.stdout_text;
  int result = -1, version = -1, direct_result = -1, direct = -2, id_filled = -1;
  ASSERT_EQ(std::sscanf(shimmed.stdout_text.c_str(), "version %d %d direct %d %d unique_id %d",
                        &result, &version, &direct_result, &direct, &id_filled),
            5)
      << shimmed.stdout_text;
  EXPECT_EQ(shimmed.stdout_text, plain.stdout_text);
  EXPECT_EQ(result, 0);
  EXPECT_EQ(version, direct);
  EXPECT_EQ(id_filled, 1);
  expect_real_nccl_noted(trace_path, direct, "(local scope)");
}

// A program that probes for NCCL with dlsym(RTLD_DEFAULT) while none is loaded finds nothing on
// its own. Under the variant without NCCL hooks (moescope record --no-nccl) it must find nothing
// too. The default shim's ncclX is found (the one case where it shows), answers
// ncclSystemError and warns once: a known limit, docs/capture.md.
TEST(NcclRealLibrary, AProbeForNcclFindsNothingUnderTheShimWithoutNccl) {
  const char* program = MOESCOPE_NCCL_LOCAL_SCOPE_PROGRAM;
  std::string trace_path = temp_path("nccl_probe.moetrace");
  ProgramRun plain = run_program(program, "", temp_path("probe_plain.log"), "probe");
  ProgramRun without_nccl =
      run_program(program,
                  "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_NO_NCCL_LIBRARY) +
                      "' MOESCOPE_OUTPUT='" + trace_path + "'",
                  temp_path("probe_without.log"), "probe");
  ProgramRun with_nccl = run_program(program,
                                     "LD_PRELOAD='" + preload_list(MOESCOPE_INJECT_LIBRARY) +
                                         "' MOESCOPE_OUTPUT='" + trace_path + "'",
                                     temp_path("probe_with.log"), "probe");
  EXPECT_EQ(plain.stdout_text, "probe found no result -1\n");
  EXPECT_EQ(without_nccl.stdout_text, plain.stdout_text);  // nothing else said either
  EXPECT_EQ(without_nccl.exit_code, 0);
  EXPECT_NE(with_nccl.stdout_text.find("probe found yes result 2\n"), std::string::npos);
  std::string warning = "no NCCL library is loaded";  // said once, however often NCCL is called
  size_t first = with_nccl.stdout_text.find(warning);
  EXPECT_NE(first, std::string::npos) << with_nccl.stdout_text;
  EXPECT_EQ(with_nccl.stdout_text.find(warning, first + 1), std::string::npos);
  std::remove(trace_path.c_str());
}
#endif

}  // namespace
}  // namespace moescope::testing
