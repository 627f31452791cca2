// `moescope summarize` and `moescope report` on summaries, as a user runs them: summaries are
// written beside the traces, the report reads them (same JSON as --detail, which reads the
// traces), notes a rank that falls back to its trace, and refuses summaries of two runs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <filesystem>

#include "cli_test_support.h"
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

  auto summarized = run_cli("summarize" + joined(traces));
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

  // Not a trace: a clear error, no summary.
  auto refused = run_cli("summarize '" + (dir / "job.0.moesummary").string() + "'");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.out.find("is a summary already"), std::string::npos) << refused.out;
  fs::remove_all(dir);
}

}  // namespace
