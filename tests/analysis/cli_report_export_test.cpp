// `moescope report` and `moescope export` as a user runs them.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

CommandResult run(const std::string& arguments) {
  CommandResult result;
  std::string command = std::string(MOESCOPE_CLI_PATH) + " " + arguments + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  size_t got;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.out.append(buffer.data(), got);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string joined(const std::vector<std::string>& paths) {
  std::string text;
  for (const auto& path : paths) text += " '" + path + "'";
  return text;
}

TEST(CliReport, JsonReportToFileFindsThePlantedProblem) {
  testing::SyntheticOptions options;
  options.num_ranks = 4;
  options.slow_rank = 3;
  std::string directory = testing::test_directory("cli_report");
  auto paths = testing::write_synthetic_run(directory, "run", options);
  std::string out = directory + "/report.json";
  CommandResult result = run("report --format json -o " + out + joined(paths));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  std::ifstream file(out);
  nlohmann::json json = nlohmann::json::parse(file);
  ASSERT_FALSE(json["findings"].empty());
  EXPECT_EQ(json["findings"][0]["kind"], "straggler_rank");
  EXPECT_EQ(json["findings"][0]["where"]["ranks"], nlohmann::json::array({3}));
  CommandResult markdown = run("report --format markdown" + joined(paths));
  ASSERT_EQ(markdown.exit_code, 0);
  EXPECT_NE(markdown.out.find("# moescope report"), std::string::npos);
  EXPECT_NE(markdown.out.find("straggler_rank"), std::string::npos);
}

TEST(CliReport, BadInputGivesClearErrors) {
  CommandResult format = run("report --format yaml /nonexistent.moetrace");
  EXPECT_NE(format.exit_code, 0);
  EXPECT_NE(format.out.find("text, markdown or json"), std::string::npos) << format.out;
  CommandResult missing = run("report /nonexistent/run.0.moetrace");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/run.0.moetrace"), std::string::npos) << missing.out;
}

TEST(CliExport, SplitRanksWritesOneFilePerRank) {
  testing::SyntheticOptions options;
  options.num_ranks = 2;
  std::string directory = testing::test_directory("cli_export");
  auto paths = testing::write_synthetic_run(directory, "run", options);
  CommandResult result =
      run("export --chrome " + directory + "/out.json --split-ranks" + joined(paths));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream file(directory + "/out.rank" + std::to_string(rank) + ".json");
    nlohmann::json json = nlohmann::json::parse(file);
    EXPECT_EQ(json["distributedInfo"]["rank"], rank);
  }
  CommandResult combined = run("export --chrome " + directory + "/all.json" + joined(paths));
  ASSERT_EQ(combined.exit_code, 0) << combined.out;
  EXPECT_TRUE(std::filesystem::exists(directory + "/all.json"));
}

}  // namespace
}  // namespace moescope::analysis
