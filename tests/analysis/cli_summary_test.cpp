// `moescope summarize` and `moescope report` on summaries, as a user runs them: summaries are
// written beside the traces, the report reads them (same JSON as --detail, which reads the
// traces), notes a rank that falls back to its trace, and refuses summaries of two runs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_test_support.h"
#include "diff_run_writer.h"
#include "moe_job_writer.h"

namespace {

namespace fs = std::filesystem;
using moescope::testing::joined;
using moescope::testing::run_cli;

TEST(CliSummary, SummarizeThenReportMatchesTheTracesAndNotesFallbacks) {
  const fs::path dir = fs::temp_directory_path() / ("cli_summary_" + std::to_string(getpid()));
  fs::remove_all(dir);
  moescope::testing::MoeJobConfig config;
  config.ranks = 8;
  config.steps = 12;
  config.kernels_per_layer = 2;
  config.ranks_per_host = 4;
  config.expert_parallel = 4;
  config.slow_rank = 5;
  config.slow_from_step = 6;
  config.slow_host = -1;
  const std::vector<std::string> traces = moescope::testing::write_moe_job(config, dir.string());
  ASSERT_EQ(traces.size(), 8u);

  // The job's folder stands for its traces, in `info` and `summarize` too.
  auto listed = run_cli("info '" + dir.string() + "'");
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  for (const std::string& trace : traces) {
    EXPECT_NE(listed.out.find(trace + "\n  process"), std::string::npos) << listed.out;
  }
  auto summarized = run_cli("summarize '" + dir.string() + "'");
  ASSERT_EQ(summarized.exit_code, 0) << summarized.out;
  EXPECT_NE(summarized.out.find("job.5.moesummary"), std::string::npos) << summarized.out;
  for (int r = 0; r < 8; ++r) {
    EXPECT_TRUE(fs::exists(dir / ("job." + std::to_string(r) + ".moesummary")));
  }

  auto detail = run_cli("report -q --format json --detail" + joined(traces));
  auto summaries = run_cli("report -q --format json" + joined(traces));
  ASSERT_EQ(detail.exit_code, 0) << detail.out;
  ASSERT_EQ(summaries.exit_code, 0) << summaries.out;
  EXPECT_EQ(summaries.out, detail.out) << "the JSON of both paths differs";
  const auto report = nlohmann::json::parse(summaries.out, nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["summary"]["ranks"], 8);

  // A summary given directly works too; a missing one falls back to its trace with a note.
  fs::remove(dir / "job.2.moesummary");
  std::vector<std::string> given = {(dir / "job.0.moesummary").string()};
  for (int r = 1; r < 8; ++r) given.push_back(traces[size_t(r)]);
  auto fallback = run_cli("report -q" + joined(given));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.out;
  EXPECT_NE(fallback.out.find("note: no summary"), std::string::npos) << fallback.out;
  EXPECT_NE(fallback.out.find("job.2.moetrace"), std::string::npos) << fallback.out;

  // A folder with no trace in it: named, for both.
  fs::create_directories(dir / "empty");
  for (const char* command : {"info", "summarize"}) {
    auto empty = run_cli(std::string(command) + " '" + (dir / "empty").string() + "'");
    EXPECT_EQ(empty.exit_code, 1) << command;
    EXPECT_NE(empty.out.find((dir / "empty").string() + ": no .moetrace file in this folder"),
              std::string::npos)
        << empty.out;
  }

  // Not a trace: a clear error, no summary.
  auto refused = run_cli("summarize '" + (dir / "job.0.moesummary").string() + "'");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.out.find("is a summary already"), std::string::npos) << refused.out;
  fs::remove_all(dir);
}

// Every number of `a` equals the one at the same place in `b` within 1e-9 relative; the rest
// (keys, strings, array lengths) exactly. `where` names the place in a failure.
void expect_same_numbers(const nlohmann::json& a, const nlohmann::json& b,
                         const std::string& where = "$") {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    EXPECT_LE(std::abs(x - y), 1e-9 * std::max(std::abs(x), std::abs(y))) << where;
    return;
  }
  ASSERT_EQ(a.type(), b.type()) << where;
  if (a.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (auto it = a.begin(); it != a.end(); ++it) {
      ASSERT_TRUE(b.contains(it.key())) << where << "." << it.key();
      expect_same_numbers(it.value(), b[it.key()], where + "." + it.key());
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i) {
      expect_same_numbers(a[i], b[i], where + "[" + std::to_string(i) + "]");
    }
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file, nullptr, false);
}

// A run whose ranks report the rows their experts received (so `plan` predicts from a cost
// model of busy time, and the report's findings weigh ranks by their rows): `plan` and
// `report` from the summaries give the numbers of the full traces (--detail); given the
// summaries alone (no trace left) they still do; a missing summary falls back with a note.
TEST(CliSummary, PlanAndReportFromSummariesMatchTheTraces) {
  const fs::path dir = fs::temp_directory_path() / ("cli_summary_plan_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  moescope::testing::DiffRunOptions options;
  options.num_ranks = 2;
  options.num_steps = 16;
  options.hot_layer = 1;
  options.hot_factor = 3.0;
  const std::vector<std::string> traces =
      moescope::testing::write_diff_run(dir.string(), "run", options);
  ASSERT_EQ(traces.size(), 2u);
  ASSERT_EQ(run_cli("summarize -q" + joined(traces)).exit_code, 0);

  const std::string plan_args = "plan --gpus 2 --slots 10 --json ";
  const std::string detail_json = (dir / "detail.json").string();
  const std::string summary_json = (dir / "summary.json").string();
  auto detail = run_cli(plan_args + "'" + detail_json + "' --detail" + joined(traces));
  auto from_summaries = run_cli(plan_args + "'" + summary_json + "'" + joined(traces));
  ASSERT_EQ(detail.exit_code, 0) << detail.out;
  ASSERT_EQ(from_summaries.exit_code, 0) << from_summaries.out;
  EXPECT_EQ(from_summaries.out.find("note:"), std::string::npos) << from_summaries.out;
  const nlohmann::json expected = read_json(detail_json);
  ASSERT_TRUE(expected.is_object());
  ASSERT_TRUE(expected.contains("prediction")) << detail.out;  // the cost model was fitted
  EXPECT_GT(expected["prediction"]["cost_model"]["ms_per_row"].get<double>(), 0.0);
  expect_same_numbers(read_json(summary_json), expected);

  auto report_detail = run_cli("report -q --format json --detail" + joined(traces));
  auto report_summaries = run_cli("report -q --format json" + joined(traces));
  ASSERT_EQ(report_detail.exit_code, 0) << report_detail.out;
  const nlohmann::json report_expected = nlohmann::json::parse(report_detail.out, nullptr, false);
  ASSERT_TRUE(report_expected.is_object()) << report_detail.out;
  EXPECT_NE(report_detail.out.find("expert_imbalance"), std::string::npos) << report_detail.out;
  expect_same_numbers(nlohmann::json::parse(report_summaries.out, nullptr, false), report_expected);

  // The summaries alone: the traces moved away, the numbers stay.
  const fs::path away = dir / "away";
  fs::create_directories(away);
  std::vector<std::string> summaries;
  for (const std::string& trace : traces) {
    const fs::path path(trace);
    fs::rename(path, away / path.filename());
    summaries.push_back((dir / path.stem()).string() + ".moesummary");
  }
  const std::string alone_json = (dir / "alone.json").string();
  auto alone = run_cli(plan_args + "'" + alone_json + "'" + joined(summaries));
  ASSERT_EQ(alone.exit_code, 0) << alone.out;
  expect_same_numbers(read_json(alone_json), expected);

  // A rank without its summary is read from its trace, with a note.
  for (const std::string& trace : traces) {
    const fs::path path(trace);
    fs::rename(away / path.filename(), path);
  }
  fs::remove(summaries[1]);
  const std::string fallback_json = (dir / "fallback.json").string();
  auto fallback = run_cli(plan_args + "'" + fallback_json + "'" + joined(traces));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.out;
  EXPECT_NE(fallback.out.find("moescope plan: note: no summary"), std::string::npos)
      << fallback.out;
  expect_same_numbers(read_json(fallback_json), expected);
  fs::remove_all(dir);
}

// `diff` of two runs (phases, module and program spans, collectives, expert load, findings, and
// the check of a plan's prediction) from the summaries gives the numbers of --detail.
TEST(CliSummary, DiffFromSummariesMatchesTheTraces) {
  const fs::path dir = fs::temp_directory_path() / ("cli_summary_diff_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  moescope::testing::DiffRunOptions options;
  options.num_ranks = 2;
  options.num_steps = 16;
  options.hot_layer = 1;
  options.hot_factor = 3.0;
  const std::vector<std::string> base =
      moescope::testing::write_diff_run(dir.string(), "base", options);
  options.seed = 2;
  options.forward_extra_ms = 1.5;
  options.hot_layer = -1;
  options.balanced_rows = true;
  const std::vector<std::string> next =
      moescope::testing::write_diff_run(dir.string(), "next", options);
  ASSERT_EQ(run_cli("summarize -q" + joined(base) + joined(next)).exit_code, 0);
  const std::string plan = (dir / "plan.json").string();
  ASSERT_EQ(run_cli("plan --gpus 2 --slots 10 --json '" + plan + "'" + joined(base)).exit_code, 0);

  const std::string diff_args = "diff --format json" + joined(base) + " --against" + joined(next) +
                                " --predicted '" + plan + "'";
  const std::string detail_json = (dir / "detail.json").string();
  const std::string summary_json = (dir / "summary.json").string();
  auto detail = run_cli(diff_args + " --detail -o '" + detail_json + "'");
  auto from_summaries = run_cli(diff_args + " -o '" + summary_json + "'");
  ASSERT_EQ(detail.exit_code, 0) << detail.out;
  ASSERT_EQ(from_summaries.exit_code, 0) << from_summaries.out;
  EXPECT_EQ(from_summaries.out.find("note:"), std::string::npos) << from_summaries.out;
  const nlohmann::json expected = read_json(detail_json);
  ASSERT_TRUE(expected.is_object()) << detail.out;
  const std::string text = expected.dump();
  for (const char* section : {"\"phase\"", "\"module\"", "\"collective\"", "\"layer\""}) {
    EXPECT_NE(text.find(section), std::string::npos) << section << " rows missing: " << text;
  }
  EXPECT_NE(text.find("forward"), std::string::npos);
  expect_same_numbers(read_json(summary_json), expected);

  // The summaries alone (no trace left) give the same.
  auto summaries_of = [&](const std::vector<std::string>& traces) {
    std::string list;
    for (const std::string& trace : traces) {
      fs::remove(trace);
      list += " '" + (dir / fs::path(trace).stem()).string() + ".moesummary'";
    }
    return list;
  };
  const std::string alone_args = "diff --format json" + summaries_of(base) + " --against" +
                                 summaries_of(next) + " --predicted '" + plan + "'";
  const std::string alone_json = (dir / "alone.json").string();
  auto alone = run_cli(alone_args + " -o '" + alone_json + "'");
  ASSERT_EQ(alone.exit_code, 0) << alone.out;
  expect_same_numbers(read_json(alone_json), expected);
  fs::remove_all(dir);
}

}  // namespace
