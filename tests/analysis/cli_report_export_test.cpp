// `moescope report` and `moescope export` as a user runs them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::CommandResult;
using testing::joined;
using testing::run_cli;

TEST(CliReport, JsonReportToFileFindsThePlantedProblem) {
  testing::SyntheticOptions options;
  options.num_ranks = 4;
  options.slow_rank = 3;
  std::string directory = testing::test_directory("cli_report");
  auto paths = testing::write_synthetic_run(directory, "run", options);
  std::string out = directory + "/report.json";
  CommandResult result = run_cli("report --format json -o " + out + joined(paths));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  std::ifstream file(out);
  nlohmann::json json = nlohmann::json::parse(file);
  ASSERT_FALSE(json["findings"].empty());
  EXPECT_EQ(json["findings"][0]["kind"], "straggler_rank");
  EXPECT_EQ(json["findings"][0]["where"]["ranks"], nlohmann::json::array({3}));
  CommandResult markdown = run_cli("report --format markdown" + joined(paths));
  ASSERT_EQ(markdown.exit_code, 0);
  EXPECT_NE(markdown.out.find("# moescope report"), std::string::npos);
  EXPECT_NE(markdown.out.find("straggler_rank"), std::string::npos);
}

TEST(CliReport, BadInputGivesClearErrors) {
  CommandResult format = run_cli("report --format yaml /nonexistent.moetrace");
  EXPECT_NE(format.exit_code, 0);
  EXPECT_NE(format.out.find("text, markdown or json"), std::string::npos) << format.out;
  CommandResult missing = run_cli("report /nonexistent/run.0.moetrace");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/run.0.moetrace"), std::string::npos) << missing.out;
}

TEST(CliExport, SplitRanksWritesOneFilePerRank) {
  testing::SyntheticOptions options;
  options.num_ranks = 2;
  std::string directory = testing::test_directory("cli_export");
  auto paths = testing::write_synthetic_run(directory, "run", options);
  CommandResult result =
      run_cli("export --chrome " + directory + "/out.json --split-ranks" + joined(paths));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream file(directory + "/out.rank" + std::to_string(rank) + ".json");
    nlohmann::json json = nlohmann::json::parse(file);
    EXPECT_EQ(json["distributedInfo"]["rank"], rank);
  }
  CommandResult combined = run_cli("export --chrome " + directory + "/all.json" + joined(paths));
  ASSERT_EQ(combined.exit_code, 0) << combined.out;
  EXPECT_TRUE(std::filesystem::exists(directory + "/all.json"));
}

}  // namespace
}  // namespace moescope::analysis
