// Issue 33's two crash classes, through the built CLI as a user meets them: a Kineto JSON with a
// field of the wrong type (aborted every command with an uncaught nlohmann::json::type_error)
// and one with `ts: 1e300` (became INT64_MIN; `export --chrome` then wrote past a buffer).
// Each command must now exit normally, say which event it skipped and why, and still analyse
// the rest of the file.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_test_support.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::CommandResult;
using testing::run_cli;

// Three good CPU ops on one thread; `hostile` is inserted as traceEvents[1].
std::string write_kineto(const std::string& name, const nlohmann::json& hostile) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::mm"},
                    {"pid", 1},
                    {"tid", 2},
                    {"ts", 100.0},
                    {"dur", 50.0}});
  events.push_back(hostile);
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::add"},
                    {"pid", 1},
                    {"tid", 2},
                    {"ts", 200.0},
                    {"dur", 20.0}});
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::relu"},
                    {"pid", 1},
                    {"tid", 2},
                    {"ts", 300.0},
                    {"dur", 10.0}});
  const std::string path = testing::test_directory("cli_hostile") + "/" + name + ".json";
  std::ofstream(path) << nlohmann::json{{"traceEvents", events}}.dump();
  return path;
}

// Every command that reads traces, on `path`: none may crash, each names the skipped event.
void expect_every_command_survives(const std::string& path, const std::string& reason) {
  const std::string directory = testing::test_directory("cli_hostile_out");
  const std::vector<std::string> commands = {
      "report " + path,
      "report --format json " + path,
      "info " + path,
      "export --chrome " + directory + "/out.json " + path,
      "diff " + path + " --against " + path,
      "metrics --jsonl " + directory + "/metrics.jsonl --tensorboard " + directory + "/tb " + path,
  };
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    CommandResult result = run_cli(command);
    EXPECT_EQ(result.exit_code, 0) << result.out;
    EXPECT_NE(result.out.find("traceEvents[1]"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find(reason), std::string::npos) << result.out;
  }
  // The export is valid JSON holding the three good events (and not the hostile one).
  std::ifstream exported(directory + "/out.json");
  nlohmann::json chrome = nlohmann::json::parse(exported, nullptr, false);
  ASSERT_FALSE(chrome.is_discarded());
  int good = 0;
  for (const auto& event : chrome["traceEvents"]) {
    if (event.contains("ts")) {
      EXPECT_GE(event["ts"].get<double>(), 0.0) << event.dump();
      EXPECT_LT(event["ts"].get<double>(), 1e6) << event.dump();
    }
    if (event.value("ph", "") != "X") continue;
    const std::string name = event.value("name", "");
    good += name == "aten::mm" || name == "aten::add" || name == "aten::relu";
    EXPECT_NE(name, "huge") << "the hostile event is not exported";
  }
  EXPECT_EQ(good, 3);
}

TEST(CliMetricsAndTop, BadUseSaysWhatIsWrong) {
  CommandResult missing = run_cli("metrics /nonexistent/run.0.moetrace --jsonl -");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/run.0.moetrace:0: cannot open"), std::string::npos)
      << missing.out;
  const std::string trace =
      std::string(MOESCOPE_ANALYSIS_TEST_DIR) + "/../data/moe_train_2ranks/run.0.moetrace";
  CommandResult nowhere = run_cli("metrics " + trace);
  EXPECT_EQ(nowhere.exit_code, 1);
  EXPECT_NE(nowhere.out.find("say where the metrics go: --jsonl FILE"), std::string::npos)
      << nowhere.out;
  CommandResult top = run_cli("top --once /nonexistent/run.0.moetrace");
  EXPECT_NE(top.out.find("/nonexistent/run.0.moetrace:0: cannot open"), std::string::npos)
      << top.out;
}

TEST(CliHostileKineto, WrongTypedFieldsAreSkippedWithAWarning) {
  // Each of the wrong types (a number, array, null, object where a string is
  // expected). The first four aborted every command on main (uncaught type_error 302).
  const nlohmann::json cases[] = {
      {{"ph", "i"}, {"name", 5}, {"pid", 1}, {"tid", 2}, {"ts", 150.0}},
      {{"ph", "C"}, {"name", nlohmann::json::array({1})}, {"ts", 150.0}, {"args", {{"v", 1}}}},
      {{"ph", "M"}, {"name", nullptr}, {"pid", 1}, {"tid", 2}},
      {{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", {{"a", 1}}}, {"ts", 150.0}, {"dur", 1.0}},
      {{"ph", "X"}, {"cat", "cpu_op"}, {"name", 5}, {"pid", 1}, {"tid", 2}, {"ts", 150.0}},
      {{"ph", "X"}, {"cat", nlohmann::json::array({1})}, {"name", "x"}, {"ts", 150.0}},
      {{"ph", "i"}, {"name", "[memory]"}, {"ts", 150.0}, {"args", {{"Bytes", "many"}}}},
      {{"ph", "X"}, {"cat", "kernel"}, {"name", "k"}, {"ts", 150.0}, {"dur", "1"}},
  };
  const char* reasons[] = {"not a string", "not a string", "not a string", "not a string",
                           "not a string", "not a string", "not a number", "not a number"};
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(cases[i].dump());
    expect_every_command_survives(write_kineto("wrong_type" + std::to_string(i), cases[i]),
                                  reasons[i]);
  }
}

TEST(CliHostileKineto, HugeTimestampIsSkippedAndExportStaysValid) {
  // The counter sample crashed `export --chrome` on main (INT64_MIN into JsonStream::micros);
  // the others exported garbage times.
  const nlohmann::json cases[] = {
      {{"ph", "C"}, {"name", "c"}, {"pid", 1}, {"tid", 2}, {"ts", 1e300}, {"args", {{"v", 1}}}},
      {{"ph", "X"},
       {"cat", "cpu_op"},
       {"name", "huge"},
       {"pid", 1},
       {"tid", 2},
       {"ts", 1e300},
       {"dur", 1.0}},
      {{"ph", "X"},
       {"cat", "cpu_op"},
       {"name", "huge"},
       {"pid", 1},
       {"tid", 2},
       {"ts", -1e300},
       {"dur", 1.0}},
      {{"ph", "X"},
       {"cat", "kernel"},
       {"name", "huge"},
       {"pid", 1},
       {"tid", 2},
       {"ts", 150.0},
       {"dur", 1e300}},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(cases[i].dump());
    expect_every_command_survives(write_kineto("huge_ts" + std::to_string(i), cases[i]),
                                  "outside the times a trace can hold");
  }
}

TEST(CliHostileKineto, ManyBadEventsAreCountedNotAllListed) {
  nlohmann::json events = nlohmann::json::array();
  for (int i = 0; i < 100; ++i) events.push_back({{"ph", "X"}, {"name", i}, {"ts", 1.0}});
  events.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "ok"}, {"ts", 1.0}, {"dur", 1.0}});
  const std::string path = testing::test_directory("cli_hostile") + "/many.json";
  std::ofstream(path) << nlohmann::json{{"traceEvents", events}}.dump();
  CommandResult result = run_cli("report " + path);
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("100 event(s) skipped"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("traceEvents[20]"), std::string::npos) << "only 20 are listed";
}

}  // namespace
}  // namespace moescope::analysis
