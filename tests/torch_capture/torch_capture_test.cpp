// The C++ torch capture end to end: Python programs under `moescope record` load
// libmoescope_torch_capture.so through moescope.autocapture.torch_capture, and their traces hold
// the collectives they issued (two Gloo ranks with torchrun, DDP), or every operator with its
// shapes; the loader refuses a library built for another torch without loading it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "capture_test_support.h"
#include "moescope/recorder.h"

namespace moescope::testing {
namespace {

using trace::RecordKind;

RunOptions python_options() {
  RunOptions options;
  options.environment = {{"PYTHONPATH", source_dir() + "/profiler/python"},
                         {"OMP_NUM_THREADS", "1"}};
  options.unset_environment = {"MOESCOPE_TORCH_CAPTURE_LIBRARY"};
  options.timeout_seconds = 240;  // a hang guard: torchrun starts three interpreters
  return options;
}

std::string library_path() {
  return build_dir() + "/lib/libmoescope_torch_capture.so";
}

class TorchCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has_module("torch")) GTEST_SKIP() << "python3 lacks torch (scripts/setup.sh)";
  }
};

struct RecordedOp {
  std::string name;
  trace::CommOpRecord record;
  std::vector<uint64_t> splits;
};

std::vector<RecordedOp> comm_ops(const LoadedTrace& trace) {
  std::vector<RecordedOp> ops;
  for (const auto& record : trace.of_kind(RecordKind::kCommOp)) {
    RecordedOp op{name_of(trace, record.header().name), record.as<trace::CommOpRecord>(), {}};
    for (uint32_t i = 0; i < op.record.num_splits; ++i) {
      op.splits.push_back(record.tail<uint64_t>(sizeof(trace::CommOpRecord), i));
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

struct CompleteSpan {
  uint32_t stream;
  std::string name;
  std::string domain;
};

std::vector<CompleteSpan> complete_spans(const LoadedTrace& trace) {
  std::vector<CompleteSpan> spans;
  for (const auto& record : trace.of_kind(RecordKind::kSpanComplete)) {
    auto span = record.as<trace::SpanCompleteRecord>();
    spans.push_back({record.stream, name_of(trace, span.header.name), name_of(trace, span.domain)});
  }
  return spans;
}

// Communicator id of the process group whose description (an instant) has `description` in it.
uint64_t group_comm_id(const LoadedTrace& trace, const std::string& description) {
  for (const auto& record : trace.of_kind(RecordKind::kInstant)) {
    const std::string text = name_of(trace, record.header().name);
    if (text.rfind("process group ", 0) != 0 || text.find(description) == std::string::npos) {
      continue;
    }
    return std::stoull(text.substr(text.rfind(' ') + 1), nullptr, 16);
  }
  return 0;
}

// What each rank of collectives_ranks.py says it sent (rank<N>.json in `dir`).
std::map<int, nlohmann::json> rank_reports(const TempDir& dir) {
  std::map<int, nlohmann::json> reports;
  for (const std::string& path : dir.files(".json")) {
    auto report = nlohmann::json::parse(std::ifstream(path));
    reports[report["rank"].get<int>()] = report;
  }
  return reports;
}

TEST_F(TorchCapture, GlooCollectivesOfTwoRanksAreRecordedWithWhatEachRankSent) {
  TempDir dir;
  RunResult run = run_torchrun_program(
      record_command(dir / "run.%r.moetrace",
                     {"python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                      "2", source_dir() + "/tests/torch_capture/collectives_ranks.py", dir.path()}),
      python_options());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto reports = rank_reports(dir);
  ASSERT_EQ(reports.size(), 2u) << run.err;
  const std::map<std::string, uint32_t> kinds = {
      {"all_reduce", MOESCOPE_COMM_ALL_REDUCE},
      {"all_gather_into_tensor", MOESCOPE_COMM_ALL_GATHER},
      {"reduce_scatter_tensor", MOESCOPE_COMM_REDUCE_SCATTER},
      {"broadcast", MOESCOPE_COMM_BROADCAST},
      {"all_to_all_single", MOESCOPE_COMM_ALL_TO_ALL},
      {"send", MOESCOPE_COMM_SEND},
      {"recv", MOESCOPE_COMM_RECV}};
  // Rows of 12 bytes split 1+4 by rank 0 and 2+5 by rank 1 (collectives_ranks.py).
  const std::map<int, std::vector<uint64_t>> expected_splits = {{0, {12, 48}}, {1, {24, 60}}};

  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const nlohmann::json& report = reports[rank];
    ASSERT_TRUE(report["capture_started"].get<bool>()) << run.err;
    LoadedTrace trace = load_trace(dir / ("run." + std::to_string(rank) + ".moetrace"));
    ASSERT_TRUE(trace.complete);
    const uint64_t default_group = group_comm_id(trace, "\"default_pg\" gloo");
    const uint64_t ddp_group = group_comm_id(trace, "\"ddp\" gloo");
    ASSERT_NE(default_group, 0u);
    ASSERT_NE(ddp_group, 0u);
    ASSERT_NE(default_group, ddp_group);
    auto ops = comm_ops(trace);

    for (const auto& [name, sent] : report["sent"].items()) {
      SCOPED_TRACE(name);
      std::vector<const RecordedOp*> found;
      for (const auto& op : ops) {
        if (op.name == name && op.record.comm_id == default_group) found.push_back(&op);
      }
      ASSERT_EQ(found.size(), 1u);
      const trace::CommOpRecord& op = found[0]->record;
      EXPECT_EQ(op.bytes, sent.get<uint64_t>());
      EXPECT_EQ(op.kind, kinds.at(name));
      EXPECT_EQ(op.rank, rank);
      EXPECT_EQ(op.num_ranks, 2);
      EXPECT_EQ(op.device, -1);
      // Gloo ran it on a worker thread: its execution gave the start and the end.
      EXPECT_GE(op.start_time, op.header.time);
      EXPECT_GT(op.end_time, 0u);
      EXPECT_GE(op.end_time, op.start_time);
      if (name == "all_to_all_single") {
        EXPECT_EQ(found[0]->splits, expected_splits.at(rank));
        EXPECT_EQ(found[0]->splits, report["all_to_all_split_bytes"].get<std::vector<uint64_t>>());
      } else {
        EXPECT_TRUE(found[0]->splits.empty());
      }
      if (name == "all_reduce") {
        EXPECT_EQ(op.dtype, 6u + 100u);  // torch.float32 + 100
      }
      EXPECT_EQ(op.root, name == "broadcast" ? 0 : -1);
      EXPECT_EQ(op.peer, name == "send" ? 1 : name == "recv" ? 0 : -1);
    }

    // DDP's gradient buckets, all-reduced from C++: every parameter byte once per step.
    uint64_t ddp_bytes = 0;
    int ddp_all_reduces = 0;
    for (const auto& op : ops) {
      if (op.record.comm_id != ddp_group || op.record.kind != MOESCOPE_COMM_ALL_REDUCE) continue;
      ddp_bytes += op.record.bytes;
      ++ddp_all_reduces;
      EXPECT_EQ(op.record.num_ranks, 2);
    }
    const int steps = report["ddp_steps"].get<int>();
    EXPECT_GE(ddp_all_reduces, steps);
    EXPECT_EQ(ddp_bytes, steps * report["ddp_param_bytes"].get<uint64_t>());

    // Sequence numbers count a group's ops in the order they were issued (the file holds them
    // in the order they finished).
    std::vector<std::pair<uint64_t, uint32_t>> issued;  // enqueue time, sequence
    for (const auto& op : ops) {
      if (op.record.comm_id == default_group) {
        issued.emplace_back(op.record.header.time, op.record.sequence);
      }
    }
    std::sort(issued.begin(), issued.end());
    for (size_t i = 0; i < issued.size(); ++i) EXPECT_EQ(issued[i].second, i);

    // Gloo's execution ranges are spans on its worker threads, not on the calling thread.
    auto spans = complete_spans(trace);
    uint32_t caller_stream = UINT32_MAX;
    for (const auto& span : spans) {
      if (span.name == "all_to_all_single" && span.domain == "c10d") caller_stream = span.stream;
    }
    bool worker_span = false;
    for (const auto& span : spans) {
      worker_span |=
          span.name == "gloo:all_to_all" && span.domain == "c10d" && span.stream != caller_stream;
    }
    EXPECT_NE(caller_stream, UINT32_MAX);
    EXPECT_TRUE(worker_span);
  }
}

TEST_F(TorchCapture, OperatorModeRecordsEveryOperatorWithItsInputShapes) {
  TempDir dir;
  RunResult run = run_program(
      record_command(dir / "ops.moetrace",
                     {"python3", source_dir() + "/tests/torch_capture/operators_program.py"}),
      python_options());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.out, "ok\n") << run.err;
  LoadedTrace trace = load_trace(dir / "ops.moetrace");
  std::map<std::string, int> spans;
  bool linear_with_shapes = false;
  for (const auto& span : complete_spans(trace)) {
    if (span.domain != "torch") continue;
    ++spans[span.name];
    linear_with_shapes |= span.name.rfind("aten::addmm, sizes = [[2], [3, 5], [5, 2]", 0) == 0;
  }
  EXPECT_EQ(spans["aten::mm, sizes = [[3, 5], [5, 7]]"], 1);
  EXPECT_EQ(spans["aten::mm, sizes = [[7, 5], [5, 3]]"], 0) << "recorded after stop()";
  EXPECT_TRUE(linear_with_shapes);
  int backward_nodes = 0;
  for (const auto& [name, count] : spans) {
    backward_nodes += name.find("AddmmBackward0") != std::string::npos ? count : 0;
  }
  EXPECT_GE(backward_nodes, 1);
}

// python3 importing torch and printing the loader's answer as "<started>|<reason>|<mapped>",
// mapped = whether the capture library is in the process's memory map; under `moescope record`
// (trace in `recorded_into`) unless that is empty.
RunResult run_loader(const std::map<std::string, std::string>& environment,
                     const std::string& recorded_into) {
  RunOptions options = python_options();
  for (const auto& [key, value] : environment) options.environment[key] = value;
  std::vector<std::string> command = {
      "python3", "-c",
      "import torch\n"
      "from moescope.autocapture import torch_capture\n"
      "started, reason = torch_capture.start()\n"
      "mapped = 'libmoescope_torch_capture' in open('/proc/self/maps').read()\n"
      "print('%s|%s|%s' % (started, reason, mapped))\n"};
  if (!recorded_into.empty()) command = record_command(recorded_into, command);
  return run_program(command, options);
}

TEST_F(TorchCapture, LoaderRefusesALibraryBuiltForAnotherTorchWithoutLoadingIt) {
  TempDir dir;
  const std::string fake = dir / "libmoescope_torch_capture.so";
  ASSERT_EQ(symlink(library_path().c_str(), fake.c_str()), 0);
  std::ofstream(fake + ".torch_version") << "0.0.0+fake\n";
  RunResult run = run_loader({{"MOESCOPE_TORCH_CAPTURE_LIBRARY", fake}}, dir / "t.moetrace");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("False|"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("was built for torch 0.0.0+fake"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("|False\n"), std::string::npos) << "the library was loaded: " << run.out;
}

TEST_F(TorchCapture, LoaderOutsideARecordingSaysWhyAndLoadsNothing) {
  RunResult run = run_loader({{"MOESCOPE_TORCH_CAPTURE_LIBRARY", library_path()}}, "");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out,
            "False|no moescope recording in this process (run it under `moescope record`)|"
            "False\n");
}

TEST_F(TorchCapture, LibraryWithoutARecorderRefusesToStart) {
  // Loaded by hand into a process without the shim: its weak recorder references stay null.
  RunOptions options = python_options();
  RunResult run = run_program({"python3", "-c",
                               "import ctypes, torch\n"
                               "library = ctypes.CDLL('" +
                                   library_path() +
                                   "')\n"
                                   "reason = ctypes.create_string_buffer(256)\n"
                                   "result = library.moescope_torch_capture_start(1, reason, 256)\n"
                                   "print(result, reason.value.decode())\n"},
                              options);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out,
            "-1 no moescope recorder in this process (run it under `moescope record`, which "
            "preloads libmoescope_inject.so)\n");
}

}  // namespace
}  // namespace moescope::testing
