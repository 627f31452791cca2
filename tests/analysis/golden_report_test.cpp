// Every trace of golden_reports/cases.txt (tests/data and the real third-party traces of
// MOESCOPE_SHARED_DATA) loads to the same model as the build before the trace schema refactor
// (issue 27): the built CLI's `moescope report --format json` and `moescope info` equal the
// expected files that build wrote (golden_reports/make_golden.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

const fs::path kGoldenDir = fs::path(MOESCOPE_ANALYSIS_TEST_DIR) / "golden_reports";

struct GoldenCase {
  std::string name;
  std::string folder;  // relative to the repository, or "@shared/..."
  std::vector<std::string> files;
};

std::vector<GoldenCase> golden_cases() {
  std::ifstream in(kGoldenDir / "cases.txt");
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    GoldenCase golden;
    words >> golden.name >> golden.folder;
    for (std::string file; words >> file;) golden.files.push_back(file);
    cases.push_back(golden);
  }
  return cases;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `command` in `folder`; its stdout.
std::string run_in(const fs::path& folder, const std::string& command, int& status) {
  const std::string line = "cd '" + folder.string() + "' && " + command;
  FILE* pipe = popen(line.c_str(), "r");
  std::string out;
  if (!pipe) {
    status = -1;
    return out;
  }
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  status = pclose(pipe);
  return out;
}

TEST(GoldenReports, EveryTraceLoadsToTheModelOfBefore) {
  const std::vector<GoldenCase> cases = golden_cases();
  ASSERT_GE(cases.size(), 3u) << "cannot read " << (kGoldenDir / "cases.txt");
  const char* shared = std::getenv("MOESCOPE_SHARED_DATA");
  const fs::path shared_dir =
      shared && *shared ? fs::path(shared) : fs::path(MOESCOPE_SHARED_DATA_DIR);
  const fs::path output = fs::temp_directory_path() / ("golden_" + std::to_string(getpid()));
  fs::create_directories(output);
  int compared = 0;
  for (const GoldenCase& golden : cases) {
    fs::path folder;
    if (golden.folder.rfind("@shared/", 0) == 0) {
      folder = shared_dir / golden.folder.substr(8);
      if (!fs::exists(folder)) {
        std::printf("skipped %s: no %s (set MOESCOPE_SHARED_DATA)\n", golden.name.c_str(),
                    folder.c_str());
        continue;
      }
    } else {
      folder = fs::path(MOESCOPE_SOURCE_DIR) / golden.folder;
    }
    std::string files;
    for (const std::string& file : golden.files) files += " '" + file + "'";
    const fs::path report = output / (golden.name + ".report.json");
    int status = 0;
    run_in(folder,
           std::string("'") + MOESCOPE_CLI_PATH + "' report --format json -q -o '" +
               report.string() + "'" + files,
           status);
    ASSERT_EQ(status, 0) << golden.name << ": moescope report failed";
    EXPECT_EQ(read_file(report), read_file(kGoldenDir / (golden.name + ".report.json")))
        << golden.name << ": the report changed (" << report << ")";
    const std::string info =
        run_in(folder, std::string("'") + MOESCOPE_CLI_PATH + "' info" + files, status);
    ASSERT_EQ(status, 0) << golden.name << ": moescope info failed";
    EXPECT_EQ(info, read_file(kGoldenDir / (golden.name + ".info.txt")))
        << golden.name << ": moescope info changed";
    ++compared;
  }
  fs::remove_all(output);
  EXPECT_GE(compared, 3);
}

}  // namespace
