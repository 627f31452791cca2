// Python programs under `moescope record`: a PyTorch CPU training script annotated with the
// `nvtx` package and moescope's Python module, and two ranks launched by torchrun.
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "capture_test_support.h"

namespace moescope::testing {
namespace {

using trace::RecordKind;

std::string train_script() {
  return source_dir() + "/tests/capture/torch_nvtx_train.py";
}

RunOptions python_options() {
  RunOptions options;
  options.environment = {{"PYTHONPATH", source_dir() + "/profiler/python"},
                         {"OMP_NUM_THREADS", "1"}};
  // A hang guard, not a speed check. Under ASan (the shim preloads the sanitizer into python)
  // on the 2-core machine with other work running, one run took up to 63 s (torchrun: three
  // interpreters importing torch); 120 s left too little room. 200 s stays below CTest's
  // 300 s, so a hang still ends with this test's own message.
  options.timeout_seconds = 200;
  return options;
}

class CapturePython : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* module : {"torch", "nvtx"}) {
      if (!python_has_module(module)) {
        GTEST_SKIP() << "python3 lacks the '" << module
                     << "' module (scripts/setup.sh installs it)";
      }
    }
  }
};

// The one trace of the training script: wrapper scripts (pyenv's python3) exec the real
// interpreter in the same process, so there is exactly one file.
LoadedTrace only_trace(const TempDir& dir) {
  auto files = dir.files();
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? LoadedTrace{} : load_trace(files[0]);
}

void expect_training_recorded(const LoadedTrace& trace, int steps) {
  std::map<std::string, int> spans;
  std::map<std::string, int> phases;  // the zero-code capture's own, in their own domain
  for (const auto& span : rebuild_spans(trace)) {
    if (!span.closed) continue;
    if (span.domain == "moescope.phase") {
      ++phases[span.name];
      continue;
    }
    if (span.domain == "moescope.module") continue;
    ++spans[span.name];
    if (span.name == "train_step" || span.name == "router") {
      EXPECT_EQ(span.domain, "train");
    }
    if (span.name == "forward") {
      EXPECT_EQ(span.parent, "train_step");
    }
    if (span.name == "router") {
      EXPECT_EQ(span.parent, "forward");
    }
    if (span.name == "optimizer_step") {  // torch.cuda.nvtx: torch's own copy of NVTX
      EXPECT_EQ(span.parent, "backward");
      EXPECT_EQ(span.domain, "");
    }
  }
  EXPECT_EQ(spans["train_step"], steps);  // nvtx.annotate
  EXPECT_EQ(spans["router"], steps);
  EXPECT_EQ(spans["experts"], steps);
  EXPECT_EQ(spans["forward"], steps);  // moescope.range
  EXPECT_EQ(spans["backward"], steps);
  EXPECT_EQ(spans["optimizer_step"], steps);
  auto loads = trace.of_kind(RecordKind::kExpertLoad);
  ASSERT_EQ(loads.size(), static_cast<size_t>(steps));
  for (int step = 0; step < steps; ++step) {
    auto load = loads[step].as<trace::ExpertLoadRecord>();
    EXPECT_EQ(load.step, step);
    EXPECT_EQ(load.layer, 0u);
    ASSERT_EQ(load.num_experts, 4u);
    uint32_t tokens = 0;
    for (uint32_t e = 0; e < 4; ++e) {
      tokens += loads[step].tail<uint32_t>(sizeof(trace::ExpertLoadRecord), e);
    }
    EXPECT_EQ(tokens, 64u);  // every token routed to one expert
  }
  // The zero-code capture saw the model's forward, the backward and the optimizer, and left
  // the step numbers to the program, which calls moescope.step().
  EXPECT_EQ(phases["forward"], steps);
  EXPECT_EQ(phases["backward"], steps);
  EXPECT_EQ(phases["optimizer"], steps);
  auto step_records = trace.of_kind(RecordKind::kStep);
  ASSERT_EQ(step_records.size(), static_cast<size_t>(steps));
  EXPECT_EQ(trace.of_kind(RecordKind::kCounter).size(), static_cast<size_t>(steps));
}

TEST_F(CapturePython, TrainingScriptRangesAndAnnotationsAreRecordedOutputUnchanged) {
  TempDir dir;
  RunResult plain = run_program({"python3", train_script(), "--exit-code", "4"}, python_options());
  RunResult recorded = run_program(
      record_command(dir / "train.%r.moetrace", {"python3", train_script(), "--exit-code", "4"}),
      python_options());
  EXPECT_EQ(plain.exit_code, 4) << plain.err;
  EXPECT_EQ(recorded.exit_code, 4) << recorded.err;
  EXPECT_EQ(recorded.out, plain.out);
  ASSERT_NE(plain.out.find("step 3 loss"), std::string::npos) << plain.out;
  LoadedTrace trace = only_trace(dir);
  EXPECT_TRUE(trace.complete);
  expect_training_recorded(trace, 4);
  bool done_mark = false;
  for (const auto& mark : trace.of_kind(RecordKind::kInstant)) {
    done_mark |= name_of(trace, mark.header().name) == "done";
  }
  EXPECT_TRUE(done_mark);
}

TEST_F(CapturePython, InterruptedTrainingLeavesACompleteTrace) {
  TempDir dir;
  RunOptions options = python_options();
  options.signal_after_output = "waiting\n";
  options.signal_number = SIGINT;
  RunResult recorded =
      run_program(record_command(dir / "train.moetrace",
                                 {"python3", train_script(), "--steps", "4", "--wait-after", "1"}),
                  options);
  EXPECT_FALSE(recorded.timed_out);
  // Python turns SIGINT into KeyboardInterrupt; uncaught, it ends by SIGINT itself.
  EXPECT_EQ(recorded.exit_code, 128 + SIGINT) << recorded.err;
  EXPECT_NE(recorded.err.find("KeyboardInterrupt"), std::string::npos) << recorded.err;
  LoadedTrace trace = only_trace(dir);
  EXPECT_TRUE(trace.complete) << "no closing chunk after SIGINT";
  expect_training_recorded(trace, 2);
  // stdout is exactly the program's: its step lines (the losses it printed are the ones it
  // recorded as counters) and "waiting", nothing added, nothing lost to the interruption.
  auto losses = trace.of_kind(RecordKind::kCounter);
  ASSERT_EQ(losses.size(), 2u);
  char expected[128];
  std::snprintf(expected, sizeof(expected), "step 0 loss %.6f\nstep 1 loss %.6f\nwaiting\n",
                losses[0].as<trace::CounterRecord>().value,
                losses[1].as<trace::CounterRecord>().value);
  EXPECT_EQ(recorded.out, expected);
}

TEST_F(CapturePython, ModuleIsANoOpWithoutRecorderThatSaysSoOnce) {
  RunResult run = run_program({"python3", "-c",
                               "import moescope\n"
                               "assert not moescope.recording()\n"
                               "moescope.step(1)\n"
                               "with moescope.range('x'):\n"
                               "    moescope.expert_load(0, [1, 2, 3])\n"
                               "moescope.counter('c', 1.0)\n"
                               "print('ok')\n"},
                              python_options());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "ok\n");
  // One line for the whole process, naming the first call.
  EXPECT_EQ(count_occurrences(run.err, "moescope: not being recorded"), 1u) << run.err;
  EXPECT_NE(run.err.find("moescope.step() and the other annotations do nothing"), std::string::npos)
      << run.err;
}

// Each rank's trace, and (written by `record` where the ranks ran, once they ended) its rank
// summary, from which `report` gives the same JSON as from the traces themselves.
TEST_F(CapturePython, TorchrunRanksWriteOneTraceAndOneSummaryEach) {
  TempDir dir;
  constexpr int kSteps = 4;
  RunResult run = run_torchrun_program(
      record_command(
          dir / "run.%r.moetrace",
          {"python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           source_dir() + "/tests/capture/torchrun_ranks.py", "--steps", std::to_string(kSteps)}),
      python_options());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("rank 0 of 2 sum 3"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("rank 1 of 2 sum 3"), std::string::npos) << run.out;
  // The launcher and helper processes recorded nothing and leave no file.
  ASSERT_EQ(dir.files(), (std::vector<std::string>{dir / "run.0.moetrace", dir / "run.1.moetrace"}))
      << run.err;
  ASSERT_EQ(dir.files(".moesummary"),
            (std::vector<std::string>{dir / "run.0.moesummary", dir / "run.1.moesummary"}))
      << run.err;
  EXPECT_EQ(dir.files(".partial"), std::vector<std::string>{});
  for (int rank = 0; rank < 2; ++rank) {
    LoadedTrace trace = load_trace(dir / ("run." + std::to_string(rank) + ".moetrace"));
    EXPECT_TRUE(trace.complete);
    auto metadata = nlohmann::json::parse(trace.metadata_json);
    EXPECT_EQ(metadata["rank"], rank);
    EXPECT_EQ(metadata["world_size"], 2);
    int allreduce_spans = 0;
    for (const auto& span : rebuild_spans(trace)) allreduce_spans += span.name == "allreduce_step";
    EXPECT_EQ(allreduce_spans, kSteps);
    auto loads = trace.of_kind(RecordKind::kExpertLoad);
    ASSERT_EQ(loads.size(), size_t(kSteps));
    EXPECT_EQ(loads[0].as<trace::ExpertLoadRecord>().rank, rank);
    EXPECT_EQ(loads[0].tail<uint32_t>(sizeof(trace::ExpertLoadRecord), 2), 20u + rank);
  }

  const std::vector<std::string> traces = {dir / "run.0.moetrace", dir / "run.1.moetrace"};
  auto report = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {moescope_binary(), "report", "-q", "--format", "json"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), traces.begin(), traces.end());
    return run_program(argv);
  };
  RunResult from_summaries = report({});
  RunResult from_traces = report({"--detail"});
  ASSERT_EQ(from_summaries.exit_code, 0) << from_summaries.err;
  ASSERT_EQ(from_traces.exit_code, 0) << from_traces.err;
  EXPECT_EQ(from_summaries.err, "") << "a rank fell back to its trace";
  EXPECT_EQ(from_summaries.out, from_traces.out) << "the JSON of both paths differs";
  auto parsed = nlohmann::json::parse(from_summaries.out);
  EXPECT_EQ(parsed["summary"]["ranks"], 2);
  // The optimizer's steps, seen by the zero-code capture, are the report's steps.
  EXPECT_GE(parsed["summary"]["steps"].get<int>(), kSteps - 1) << from_summaries.out;
}

}  // namespace
}  // namespace moescope::testing
