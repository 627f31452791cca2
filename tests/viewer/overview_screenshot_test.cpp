// The job overview as a person sees it: `moescope view FOLDER` on the summaries of a generated
// 64-rank job renders, under xvfb-run, the findings naming the planted rank and host above a
// heatmap in which the planted rank's row turns bright at its onset; a click on one of its
// cells opens that rank's window of steps in the timeline.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "moescope/viewer/rank_detail.h"
#include "overview_job.h"
#include "png_image.h"
#include "screenshot_layout.h"

namespace moescope::viewer {
namespace {

namespace fs = std::filesystem;
using moescope::viewer::testing::grid_from;
using testing::brightness;
using testing::PngImage;

constexpr int kWidth = 1280, kHeight = 800;

class OverviewScreenshots : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* build = std::getenv("MOESCOPE_BUILD_DIR");
    ASSERT_NE(build, nullptr) << "MOESCOPE_BUILD_DIR is set by CTest";
    build_dir_ = build;
    directory_ = build_dir_ + "/tests/viewer_overview_" + std::to_string(getpid());
    fs::remove_all(directory_);
    fs::create_directories(directory_ + "/job");
    config_ = moescope::testing::overview_job_config();
    ASSERT_EQ(moescope::testing::write_summarized_job(config_, directory_ + "/job").size(),
              size_t(config_.ranks));
  }
  // Set MOESCOPE_KEEP_SCREENSHOTS=1 to keep the PNGs for a look.
  static void TearDownTestSuite() {
    if (std::getenv("MOESCOPE_KEEP_SCREENSHOTS") == nullptr) fs::remove_all(directory_);
  }

  // `moescope view INPUT --screenshot` (`moescope-view` itself with `via_cli` false: the CLI
  // passes no --input) with `extra` arguments; loads the PNG and its layout. INPUT: the job's
  // folder unless given.
  void render(const std::string& name, const std::string& extra, PngImage& image,
              nlohmann::json& layout, bool via_cli = true, std::string input = "") {
    if (input.empty()) input = directory_ + "/job";
    const std::string png = directory_ + "/" + name + ".png";
    const std::string command =
        "cd " + directory_ + " && xvfb-run -a -s '-screen 0 1280x1024x24' " + build_dir_ +
        (via_cli ? "/bin/moescope view " : "/bin/moescope-view ") + input + " --screenshot " + png +
        " --size " + std::to_string(kWidth) + "x" + std::to_string(kHeight) + " " + extra + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    ASSERT_TRUE(testing::read_png(png, image)) << png;
    EXPECT_EQ(image.width, kWidth);
    EXPECT_EQ(image.height, kHeight);
    std::ifstream in(png + ".layout.json");
    layout = nlohmann::json::parse(in);
  }

  static int index_of(const nlohmann::json& values, int64_t value) {
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].get<int64_t>() == value) return static_cast<int>(i);
    }
    return -1;
  }

  static inline std::string build_dir_, directory_;
  static inline moescope::testing::MoeJobConfig config_;
};

TEST_F(OverviewScreenshots, NamesThePlantedRankAndHostAndItsRowBrightensAtTheOnset) {
  PngImage image;
  nlohmann::json layout;
  render("overview", "", image, layout);
  const nlohmann::json& overview = layout["overview"];
  const std::string host = moescope::testing::moe_job_host_name(config_.slow_host);
  std::string headlines;
  for (const auto& line : overview["headlines"]) headlines += line.get<std::string>() + "\n";
  EXPECT_NE(headlines.find("rank 37 slower by"), std::string::npos) << headlines;
  EXPECT_NE(headlines.find("host " + host), std::string::npos) << headlines;
  // Sorted by slowest mean (the default), grouped by host: the slow host first.
  ASSERT_EQ(overview["hosts"].size(), 8u);
  EXPECT_EQ(overview["hosts"][0], host);

  const GridLayout grid = grid_from(overview["heatmap"]);
  ASSERT_EQ(grid.rows, config_.ranks);
  const int row = index_of(overview["ranks"], config_.slow_rank);
  const int before = index_of(overview["column_steps"], config_.slow_from_step - 5);
  const int after = index_of(overview["column_steps"], config_.slow_from_step + 5);
  ASSERT_GE(row, 0);
  ASSERT_GE(before, 0);
  ASSERT_GE(after, 0);
  const double dim = brightness(image.at(grid.centre_x(before), grid.centre_y(row)));
  const double bright = brightness(image.at(grid.centre_x(after), grid.centre_y(row)));
  EXPECT_GT(bright, dim + 80) << "before the onset " << dim << ", after " << bright;
  // After the onset it is the brightest row of its column.
  for (int other = 0; other < grid.rows; ++other) {
    if (other == row) continue;
    EXPECT_LT(brightness(image.at(grid.centre_x(after), grid.centre_y(other))), bright)
        << "rank " << overview["ranks"][other];
  }
  // The slow host is a block: its 8 rows (the first group) brighter than every other row, in
  // every column's mean.
  auto mean_brightness = [&](int first_row, int rows) {
    double sum = 0;
    for (int r = first_row; r < first_row + rows; ++r) {
      for (int c = 0; c < grid.columns; ++c) {
        sum += brightness(image.at(grid.centre_x(c), grid.centre_y(r)));
      }
    }
    return sum / (rows * grid.columns);
  };
  const double slow_host = mean_brightness(0, 8);
  for (int r = 8; r < grid.rows; ++r) {
    if (r == row) continue;
    EXPECT_GT(slow_host, mean_brightness(r, 1) + 30) << "rank " << overview["ranks"][r];
  }
}

TEST_F(OverviewScreenshots, ClickOnACellOpensThatRanksWindowInTheTimeline) {
  PngImage image;
  nlohmann::json layout;
  render("overview_first", "", image, layout);
  const GridLayout grid = grid_from(layout["overview"]["heatmap"]);
  const int row = index_of(layout["overview"]["ranks"], config_.slow_rank);
  const int column = index_of(layout["overview"]["column_steps"], 30);
  ASSERT_GE(row, 0);
  ASSERT_GE(column, 0);
  const std::string click = "--input 'click " + std::to_string(grid.centre_x(column)) + " " +
                            std::to_string(grid.centre_y(row)) + "'";
  render("overview_clicked", click, image, layout, false);
  EXPECT_EQ(layout["ranks"], 1);  // one rank's trace on screen
  EXPECT_EQ(layout["files"], 1);
  EXPECT_EQ(layout["step_first"], 30 - kDetailStepsAround);
  EXPECT_EQ(layout["step_last"], 30 + kDetailStepsAround);
  // The timeline is fitted to the window (steps 28-32 of the 40), as the model computes it.
  const JobOverview overview = load_job_overview(
      {directory_ + "/job/job." + std::to_string(config_.slow_rank) + ".moesummary"});
  ASSERT_TRUE(overview.error.empty()) << overview.error;
  auto at = std::find(overview.steps.begin(), overview.steps.end(), 30);
  ASSERT_NE(at, overview.steps.end());
  const DetailRequest request =
      detail_request_for(overview, 0, size_t(at - overview.steps.begin()));
  std::unique_ptr<LoadedTrace> detail = load_rank_detail(request);
  double begin = 0, end = 0;
  ASSERT_TRUE(detail_window_range(*detail, request, begin, end));
  const double shown_begin = layout["timeline_start_ns"], shown_end = layout["timeline_end_ns"];
  EXPECT_LE(shown_begin, begin);
  EXPECT_GE(shown_end, end);
  EXPECT_LT(shown_end - shown_begin, 1.3 * (end - begin));
}

TEST_F(OverviewScreenshots, AFolderDroppedOnTheWindowOpensTheOverview) {
  PngImage image;
  nlohmann::json layout;
  render("dropped", "--panel timeline --input 'drop " + directory_ + "/job'", image, layout, false,
         directory_ + "/job/job.0.moetrace");
  const nlohmann::json& overview = layout["overview"];
  EXPECT_EQ(overview["heatmap"]["rows"], config_.ranks);
  EXPECT_EQ(overview["ranks"].size(), size_t(config_.ranks));
  EXPECT_FALSE(overview["headlines"].empty());
}

TEST_F(OverviewScreenshots, AFolderOfTracesWithoutSummariesOpensTheirTimeline) {
  const std::string traces = directory_ + "/traces_only";
  fs::create_directories(traces);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string name = "/job." + std::to_string(rank) + ".moetrace";
    fs::copy_file(directory_ + "/job" + name, traces + name);
  }
  PngImage image;
  nlohmann::json layout;
  render("traces_only", "", image, layout, true, traces);
  EXPECT_EQ(layout["ranks"], 3);
  EXPECT_EQ(layout["overview"]["heatmap"]["rows"], 0);  // the timeline, not the job overview
  EXPECT_GT(layout["timeline_end_ns"].get<double>(), layout["timeline_start_ns"].get<double>());
}

TEST_F(OverviewScreenshots, AFolderWithNothingToOpenIsAClearError) {
  const std::string empty = directory_ + "/no_summaries";
  fs::create_directories(empty);
  const std::string output = directory_ + "/no_summaries.txt";
  const std::string command = build_dir_ + "/bin/moescope view " + empty + " > " + output + " 2>&1";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  std::ifstream in(output);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(empty + " holds no .moesummary, .moetrace or PyTorch profiler"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace moescope::viewer
