// The viewer as a person sees it: a real window under xvfb-run renders every panel of a
// synthetic 2-rank trace (one hot expert) through `moescope-view --screenshot`; each PNG must
// have the requested size, not be blank, and show what its panel is about, located with the
// geometry the panel reported for that very frame.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include <stb/stb_image.h>

#include "moe_job_writer.h"
#include "moescope/analysis/finding_links.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/viewer/finding_focus.h"
#include "moescope/viewer/heatmap_layout.h"
#include "moescope/viewer/time_axis.h"
#include "sample_trace_writer.h"
#include "screenshot_layout.h"

namespace moescope::viewer {
namespace {

namespace fs = std::filesystem;
using moescope::viewer::testing::grid_from;

constexpr int kWidth = 1280, kHeight = 800;

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Rgb at(float x, float y) const {
    int ix = std::clamp(static_cast<int>(x), 0, width - 1),
        iy = std::clamp(static_cast<int>(y), 0, height - 1);
    const uint8_t* p = &rgb[(static_cast<size_t>(iy) * width + ix) * 3];
    return {p[0], p[1], p[2]};
  }
  size_t distinct_colours() const {
    std::set<uint32_t> colours;
    for (size_t i = 0; i + 2 < rgb.size(); i += 3)
      colours.insert(rgb[i] << 16 | rgb[i + 1] << 8 | rgb[i + 2]);
    return colours.size();
  }
  size_t count(Rgb colour, int tolerance) const {
    size_t n = 0;
    for (size_t i = 0; i + 2 < rgb.size(); i += 3) {
      if (std::abs(rgb[i] - colour.r) <= tolerance &&
          std::abs(rgb[i + 1] - colour.g) <= tolerance &&
          std::abs(rgb[i + 2] - colour.b) <= tolerance) {
        ++n;
      }
    }
    return n;
  }
};

bool near(Rgb a, Rgb b, int tolerance) {
  return std::abs(a.r - b.r) <= tolerance && std::abs(a.g - b.g) <= tolerance &&
         std::abs(a.b - b.b) <= tolerance;
}
double brightness(Rgb c) {
  return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
}

class ViewerScreenshots : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* build = std::getenv("MOESCOPE_BUILD_DIR");
    ASSERT_NE(build, nullptr) << "MOESCOPE_BUILD_DIR is set by CTest";
    build_dir_ = build;
    // Per process: CTest may run several of these tests at once.
    directory_ = build_dir_ + "/tests/viewer_screenshots_" + std::to_string(getpid());
    fs::create_directories(directory_);
    trace_ = testing::write_sample_trace(directory_, shape_);
  }
  // Set MOESCOPE_KEEP_SCREENSHOTS=1 to keep the PNGs for a look.
  static void TearDownTestSuite() {
    if (std::getenv("MOESCOPE_KEEP_SCREENSHOTS") == nullptr) fs::remove_all(directory_);
  }

  // Renders `panel` and loads the PNG and its layout; `via_cli` goes through `moescope view`.
  void render(const std::string& panel, Image& image, nlohmann::json& layout, bool via_cli = false,
              const std::string& extra = "", const std::string& tag = "",
              const std::vector<std::string>* files = nullptr) {
    std::string png = directory_ + "/" + panel + (via_cli ? "_cli" : "") + tag + ".png";
    fs::remove(png);
    std::string command = "cd " + directory_ + " && xvfb-run -a -s '-screen 0 1280x1024x24' " +
                          build_dir_ + (via_cli ? "/bin/moescope view" : "/bin/moescope-view");
    for (const std::string& file : files ? *files : trace_.files) command += " " + file;
    command += " --screenshot " + png + " --panel " + panel + " --size " + std::to_string(kWidth) +
               "x" + std::to_string(kHeight) + " " + extra + " 2>&1";
    int status = std::system(command.c_str());
    ASSERT_EQ(status, 0) << command;
    int channels = 0;
    uint8_t* data = stbi_load(png.c_str(), &image.width, &image.height, &channels, 3);
    ASSERT_NE(data, nullptr) << "cannot read " << png;
    image.rgb.assign(data, data + static_cast<size_t>(image.width) * image.height * 3);
    stbi_image_free(data);
    std::ifstream in(png + ".layout.json");
    layout = nlohmann::json::parse(in);
    EXPECT_EQ(image.width, kWidth);
    EXPECT_EQ(image.height, kHeight);
    // Not blank: a rendered panel has text, fills and lines in many colours.
    EXPECT_GT(image.distinct_colours(), 40u) << panel;
  }

  static inline std::string build_dir_, directory_;
  static inline testing::SampleTraceShape shape_;
  static inline testing::SampleTrace trace_;
};

TEST_F(ViewerScreenshots, ExpertHeatmapShowsTheHotExpertInTheHottestColour) {
  Image image;
  nlohmann::json layout;
  render("experts", image, layout);
  GridLayout grid = grid_from(layout["expert_heatmap"]);
  ASSERT_EQ(grid.rows, shape_.num_layers);
  ASSERT_EQ(grid.columns, shape_.num_experts);
  Rgb hottest = heat_colour(1.0);
  Rgb hot_cell = image.at(grid.centre_x(shape_.hot_expert), grid.centre_y(shape_.hot_layer));
  EXPECT_TRUE(near(hot_cell, hottest, 3))
      << int(hot_cell.r) << "," << int(hot_cell.g) << "," << int(hot_cell.b);
  // Every other cell is clearly cooler.
  for (int layer = 0; layer < grid.rows; ++layer) {
    for (int expert = 0; expert < grid.columns; ++expert) {
      if (layer == shape_.hot_layer && expert == shape_.hot_expert) continue;
      Rgb cell = image.at(grid.centre_x(expert), grid.centre_y(layer));
      EXPECT_LT(brightness(cell), brightness(hot_cell) - 60.0)
          << "layer " << layer << " expert " << expert;
    }
  }
}

TEST_F(ViewerScreenshots, CommunicationMatrixIsHottestWhereTheMostBytesGo) {
  Image image;
  nlohmann::json layout;
  render("comm", image, layout);
  GridLayout grid = grid_from(layout["comm_matrix"]);
  ASSERT_EQ(grid.rows, shape_.num_ranks);
  // The sample sends 3 MiB to the last rank and 1 MiB to the others (+4 KiB per sender rank):
  // rank 1 -> rank 1 is the largest cell; rank 0 -> rank 0 is about a third of it.
  auto corner = [&](int row, int column) {  // away from the byte label in the cell
    return image.at(grid.cell_x(column) + grid.cell_width - 8,
                    grid.cell_y(row) + grid.cell_height - 8);
  };
  EXPECT_TRUE(near(corner(1, 1), heat_colour(1.0), 3));
  double small = (1024.0 * 1024.0) / (3 * 1024.0 * 1024.0 + 4096.0);
  EXPECT_TRUE(near(corner(0, 0), heat_colour(small), 4));
  EXPECT_LT(brightness(corner(1, 0)), brightness(corner(0, 1)));
}

TEST_F(ViewerScreenshots, MemoryPanelMarksThePeak) {
  Image image;
  nlohmann::json layout;
  render("memory", image, layout);
  float x = layout["memory_peak_x"];
  float top = layout["memory_plot_top"], bottom = layout["memory_plot_bottom"];
  ASSERT_GT(x, 0.0f);
  int red = 0;
  for (float y = top + 20; y < bottom - 2; y += 4) {
    Rgb pixel = image.at(x, y);
    red += pixel.r > 200 && pixel.g < 110 && pixel.b < 110;
  }
  EXPECT_GT(red, static_cast<int>((bottom - top - 22) / 4 * 0.8))
      << "the red peak line spans the plot";
  // Stacked categories: expert weights (blue) sit at the bottom of the plot.
  EXPECT_GT(image.count({90, 150, 230}, 2), 1000u);
}

TEST_F(ViewerScreenshots, TimelineShowsSpansCommOpsAndCounterPlots) {
  Image image;
  nlohmann::json layout;
  render("timeline", image, layout);
  EXPECT_GT(image.count({224, 140, 50}, 2), 200u) << "all-to-all ops on the communicator tracks";
  EXPECT_GT(image.count({120, 180, 240}, 2), 50u) << "memory/counter plot lines";
  EXPECT_GT(image.distinct_colours(), 200u) << "named spans in their own colours, text";
}

// The first screen of the timeline: the steps with 2% margins, not the whole process lifetime.
TEST_F(ViewerScreenshots, TimelineOpensFittedToTheSteps) {
  analysis::TraceModel model = analysis::load_traces(trace_.files);
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& process : model.processes) {
    ASSERT_FALSE(process.steps.empty());
    first = std::min(first, process.steps.front().start);
    last = std::max(last, process.steps.back().end);
  }
  Image image;
  nlohmann::json layout;
  render("timeline", image, layout, false, "", "_fitted");
  TimeAxis expected(static_cast<double>(model.begin), static_cast<double>(model.end), 1000.0);
  expected.show_range(double(first), double(last), 0.02);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), expected.start_ns(), 1.0);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), expected.end_ns(), 1.0);
  // Above it, the report's root cause: its first finding and what that explains.
  const std::vector<analysis::Finding> findings = analysis::build_report(model).findings;
  ASSERT_FALSE(findings.empty());
  const std::string root_cause = layout["root_cause"];
  EXPECT_EQ(root_cause, analysis::root_cause_line(findings));
  EXPECT_EQ(root_cause.rfind("#1 " + findings.front().kind + " (", 0), 0u) << root_cause;
}

// The first screen opens with the summary above the timeline: the step-time bar in its colours,
// the root-cause chain from finding #1, and the hot expert of the sample trace as hottest cell.
TEST_F(ViewerScreenshots, FirstScreenShowsTheSummaryAboveTheTimeline) {
  Image image;
  nlohmann::json layout;
  render("timeline", image, layout, false, "", "_summary");
  const nlohmann::json& summary = layout["shown"]["summary"];
  ASSERT_TRUE(summary["drawn"].get<bool>());
  EXPECT_EQ(summary["what_happened"].get<std::string>(), "") << "a healthy run has no headline";
  EXPECT_GT(summary["top"].get<float>(), 0.0f);
  EXPECT_LT(summary["bottom"].get<float>(), layout["timeline_area_y"].get<float>())
      << "the summary is above the tracks";
  EXPECT_LT(summary["bottom"].get<float>(), kHeight * 0.5f) << "and leaves the timeline room";
  ASSERT_EQ(summary["chain_ids"][0], 1);
  ASSERT_EQ(summary["hottest"].size(), 3u);
  EXPECT_EQ(summary["hottest"][0].get<int>(), shape_.hot_layer);
  EXPECT_EQ(summary["hottest"][1].get<int>(), shape_.hot_expert);
  // The bar's parts are drawn in their colours where the layout says they are.
  const std::vector<float> bar = summary["bar"];
  const std::vector<float> ends = summary["bar_ends"];
  ASSERT_EQ(bar.size(), 4u);
  ASSERT_EQ(ends.size(), 4u);
  const float y = bar[1] + 0.5f * bar[3];
  ASSERT_GT(ends[0] - bar[0], 4.0f) << "compute is a visible part of the step";
  EXPECT_TRUE(near(image.at(0.5f * (bar[0] + ends[0]), y), {70, 130, 220}, 3));
  if (ends[1] - ends[0] > 4.0f) {
    EXPECT_TRUE(near(image.at(0.5f * (ends[0] + ends[1]), y), {230, 120, 40}, 3));
  }
}

// One click from the finding: the chain's first button selects finding #1 (its steps) and jumps
// the timeline to its place; the hottest cell's button opens the heatmap with that cell outlined.
TEST_F(ViewerScreenshots, SummaryClicksSelectTheFindingAndTheHottestCell) {
  Image image;
  nlohmann::json layout;
  render("timeline", image, layout, false, "", "_summary_before");
  const nlohmann::json summary = layout["shown"]["summary"];
  ASSERT_FALSE(summary["chain_buttons"].empty());
  auto click_at = [](const nlohmann::json& centre) {
    return "--input 'click " + std::to_string(centre[0].get<float>()) + " " +
           std::to_string(centre[1].get<float>()) + "'";
  };
  render("timeline", image, layout, false, click_at(summary["chain_buttons"][0]), "_summary_chain");
  analysis::TraceModel model = analysis::load_traces(trace_.files);
  const std::vector<analysis::Finding> findings = analysis::build_report(model).findings;
  ASSERT_FALSE(findings.empty());
  const analysis::Finding& first = findings.front();
  EXPECT_EQ(layout["step_first"].get<int64_t>(), first.where.first_step);
  const TimeFocus focus = finding_time_focus(model, first);
  TimeAxis expected(static_cast<double>(model.begin), static_cast<double>(model.end), 1000.0);
  expected.show_range(focus.begin_ns, focus.end_ns, 0.05);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), expected.start_ns(), 1.0);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), expected.end_ns(), 1.0);

  render("timeline", image, layout, false, click_at(summary["hottest_button"]), "_summary_hot");
  EXPECT_EQ(layout["focus_layer"].get<int>(), shape_.hot_layer) << "the Expert load tab is shown";
  EXPECT_EQ(layout["focus_expert"].get<int>(), shape_.hot_expert);
}

TEST_F(ViewerScreenshots, StatisticsAndReportPanelsRender) {
  Image image;
  nlohmann::json layout;
  render("stats", image, layout);
  // 3 kernel names + train_step, forward, backward, 4 layers, router, dispatch, experts, combine.
  EXPECT_EQ(layout["stats_rows"].get<int>(), 3 + 3 + shape_.num_layers + 4);
  render("report", image, layout);  // size and not blank are checked by render()
}

// Clicking the expert-imbalance finding (--finding N acts as that click) outlines the hot
// expert in the heatmap and moves the timeline to the finding's window.
TEST_F(ViewerScreenshots, FindingSelectsItsPlaceInHeatmapAndTimeline) {
  analysis::TraceModel model = analysis::load_traces(trace_.files);
  std::vector<analysis::Finding> findings = analysis::build_report(model).findings;
  int row = 0;
  for (size_t i = 0; i < findings.size(); ++i) {
    if (findings[i].kind == "expert_imbalance") row = static_cast<int>(i) + 1;
  }
  ASSERT_GT(row, 0) << "the sample's hot expert is reported";
  std::string click = "--finding " + std::to_string(row);
  Image image;
  nlohmann::json layout;
  render("experts", image, layout, false, click, "_finding");
  EXPECT_EQ(layout["focus_layer"].get<int>(), shape_.hot_layer);
  EXPECT_EQ(layout["focus_expert"].get<int>(), shape_.hot_expert);
  GridLayout grid = grid_from(layout["expert_heatmap"]);
  // The outline is a 2.5 px anti-aliased line just left of the cell: its most saturated pixel.
  Rgb outline{};
  for (float dx = 0.0f; dx <= 4.0f; dx += 1.0f) {
    Rgb pixel = image.at(grid.cell_x(shape_.hot_expert) - dx, grid.centre_y(shape_.hot_layer));
    if (pixel.b > outline.b) outline = pixel;
  }
  EXPECT_TRUE(near(outline, {80, 220, 255}, 12))
      << int(outline.r) << "," << int(outline.g) << "," << int(outline.b);

  render("timeline", image, layout, false, click, "_finding");
  TimeFocus focus = finding_time_focus(model, findings[static_cast<size_t>(row - 1)]);
  TimeAxis expected(static_cast<double>(model.begin), static_cast<double>(model.end), 1000.0);
  expected.show_range(focus.begin_ns, focus.end_ns, 0.05);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), expected.start_ns(), 1.0);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), expected.end_ns(), 1.0);
}

// --search acts as typing in the search box and pressing Enter: the first match is selected
// and brought into view.
TEST_F(ViewerScreenshots, SearchSelectsTheFirstMatch) {
  Image image;
  nlohmann::json layout;
  render("timeline", image, layout, false, "--search grouped_gemm", "_search");
  EXPECT_GE(layout["selected_track"].get<int>(), 0);
  // The stream runs router_topk (slot 0) then the first grouped GEMM (slot 1).
  EXPECT_EQ(layout["selected_slot"].get<int64_t>(), 1);
  double visible =
      layout["timeline_end_ns"].get<double>() - layout["timeline_start_ns"].get<double>();
  EXPECT_LT(visible, static_cast<double>(shape_.step_ns)) << "zoomed in to the kernel";
}

// A hung job stopped by its scheduler: ranks 0, 1 and 3 entered the last step's all-reduce and
// waited in it until the recording stopped 40 ms later; rank 2 never entered it. The timeline
// draws each waiting rank's wait on its communicator track, in the wait colour, from its entry
// to its recording's end: 40 ms long on the axis. Rank 2 has none.
TEST_F(ViewerScreenshots, AHungJobsWaitsAreDrawnToTheEndOfTheRecording) {
  const std::string dir = directory_ + "/hang";
  moescope::testing::MoeJobConfig config;
  config.ranks = 4;
  config.steps = 6;
  config.experts = 8;
  config.expert_parallel = 4;
  config.slow_host = -1;
  config.hang_missing_rank = 2;
  config.hang_stopped_after_ns = 40'000'000;
  const std::vector<std::string> files = moescope::testing::write_moe_job(config, dir);
  ASSERT_EQ(files.size(), 4u);
  Image image;
  nlohmann::json layout;
  render("timeline", image, layout, false, "", "_hang", &files);
  // The first screen says it before the step time: what `moescope report` says first.
  EXPECT_EQ(layout["shown"]["summary"]["what_happened"].get<std::string>(),
            "the traces end inside a collective (a hung job); all_reduce #5 of comm "
            "0000000000000001: rank 2 never entered it; ranks 0-1, 3 wait in it");
  // And it opens past the steps toward the waits: each wait's start is on screen.
  for (const auto& wait : layout["waits_at_end"]) {
    EXPECT_GT(wait[1].get<double>(), layout["timeline_area_x"].get<double>());
    EXPECT_LT(wait[1].get<double>() + 20,
              layout["timeline_area_x"].get<double>() + layout["timeline_width"].get<double>());
  }
  EXPECT_EQ(layout["waits_at_end"].size(), 3u);
  const double area_x = layout["timeline_area_x"], area_y = layout["timeline_area_y"];
  const double width = layout["timeline_width"];
  // Zoomed out to the whole trace (its range ends before the recording does: nothing is
  // written while the ranks wait), so that every wait's start is on screen.
  const std::string zoom_out = "--input 'wheel " + std::to_string(area_x + 0.9 * width) + " " +
                               std::to_string(area_y + 30) + " -40'";
  render("timeline", image, layout, false, zoom_out, "_hang_whole", &files);
  const double ns_per_px =
      (layout["timeline_end_ns"].get<double>() - layout["timeline_start_ns"].get<double>()) /
      layout["timeline_width"].get<double>();
  std::set<int> ranks;
  int seen = 0;
  for (const auto& wait : layout["waits_at_end"]) {
    const int rank = int(wait[0].get<float>());
    const float x0 = wait[1], x1 = wait[2], y = wait[3];
    ranks.insert(rank);
    EXPECT_NEAR((x1 - x0) * ns_per_px, 40e6, 2 * ns_per_px) << "rank " << rank;
    ASSERT_GE(x0, area_x) << "rank " << rank << "'s wait starts off screen";
    ASSERT_LT(x0 + 3, area_x + layout["timeline_width"].get<double>());
    if (y >= kHeight) continue;  // a track below the window (the tracks scroll)
    EXPECT_TRUE(near(image.at(x0 + 1, y + 3), Rgb{150, 78, 24}, 4))
        << "rank " << rank << " at x " << x0 << " y " << y;
    ++seen;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 3}));
  EXPECT_GE(seen, 1) << "no wait on screen";
}

// Scripted mouse and keys (--input) drive the real timeline: zoom around the cursor, drag-pan,
// right-drag box zoom, W, click-select and header collapse, checked against the axis maths.
TEST_F(ViewerScreenshots, MouseAndKeysDriveTheTimeline) {
  Image image;
  nlohmann::json base;
  render("timeline", image, base, false, "", "_input0");
  const double start = base["timeline_start_ns"], end = base["timeline_end_ns"];
  const double area_x = base["timeline_area_x"], area_y = base["timeline_area_y"];
  const double width = base["timeline_width"];
  ASSERT_GT(width, 500.0);
  auto at = [](double x, double y) { return std::to_string(x) + " " + std::to_string(y); };
  const double cursor_x = area_x + 0.25 * width, lane_y = area_y + 18 + 9;  // first track, lane 0
  TimeAxis expected(start, end, width);

  nlohmann::json layout;
  render("timeline", image, layout, false, "--input 'wheel " + at(cursor_x, lane_y) + " 2'",
         "_input1");
  expected.zoom_around(cursor_x - area_x, 1.25 * 1.25);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), expected.start_ns(), 1.0);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), expected.end_ns(), 1.0);

  render("timeline", image, layout, false,
         "--input 'wheel " + at(cursor_x, lane_y) + " 2; drag " + at(cursor_x, lane_y) + " " +
             at(cursor_x + 100, lane_y) + "'",
         "_input2");
  expected.pan_pixels(100.0);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), expected.start_ns(), 1.0);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), expected.end_ns(), 1.0);
  EXPECT_EQ(layout["selected_track"].get<int>(), -1) << "a drag is not a click";

  render("timeline", image, layout, false,
         "--input 'drag " + at(area_x + 200, lane_y) + " " + at(area_x + 500, lane_y) + " right'",
         "_input3");
  TimeAxis boxed(start, end, width);
  boxed.box_zoom(200.0, 500.0);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), boxed.start_ns(), 1.0);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), boxed.end_ns(), 1.0);

  render("timeline", image, layout, false, "--input 'move " + at(cursor_x, lane_y) + "; key W 30'",
         "_input4");
  double zoomed =
      layout["timeline_end_ns"].get<double>() - layout["timeline_start_ns"].get<double>();
  EXPECT_NEAR((end - start) / zoomed, std::pow(1.05, 30), 0.01 * std::pow(1.05, 30));

  render("timeline", image, layout, false,
         "--input 'click " + at(area_x + 0.5 * width, lane_y) + "; click " +
             at(area_x - 100, area_y + 9) + "'",
         "_input5");
  EXPECT_EQ(layout["selected_track"].get<int>(), 0);
  EXPECT_EQ(layout["selected_lane"].get<int>(), 0);
  EXPECT_GE(layout["selected_slot"].get<int64_t>(), 0);
  EXPECT_EQ(layout["collapsed_tracks"].get<int>(), 1) << "clicking a track header collapses it";
}

// The imbalance plot marks the rebalancing decision (applied: a green line at its step).
TEST_F(ViewerScreenshots, ImbalancePlotMarksTheRebalance) {
  Image image;
  nlohmann::json layout;
  render("experts", image, layout, false, "", "_rebalance");
  const auto& markers = layout["rebalance_markers"];
  // The sample rebalances once, at step num_steps / 2, recorded by every rank.
  ASSERT_EQ(markers.size(), static_cast<size_t>(shape_.num_ranks));
  const double x = markers[0][0];
  for (const auto& marker : markers) {
    EXPECT_TRUE(marker[1].get<bool>());
    EXPECT_EQ(marker[0].get<double>(), x);
  }
  const double top = layout["imbalance_plot_top"], bottom = layout["imbalance_plot_bottom"];
  ASSERT_GT(bottom - top, 60.0);
  auto green_pixels = [&](double column) {
    int count = 0, total = 0;
    for (double y = top + 20; y < bottom - 20; y += 1.0, ++total) {
      Rgb c = image.at(static_cast<float>(column), static_cast<float>(y));
      if (c.g > c.r + 60 && c.g > c.b + 40) ++count;
    }
    return double(count) / double(std::max(total, 1));
  };
  double on_marker = std::max({green_pixels(x - 1), green_pixels(x), green_pixels(x + 1)});
  EXPECT_GT(on_marker, 0.6) << "a green line from top to bottom at x " << x;
  EXPECT_LT(green_pixels(x - 12), 0.2) << "and not beside it";
}

// Clicking a step in the step ruler selects that step for the panels and zooms to it.
TEST_F(ViewerScreenshots, StepRulerClickSelectsAndZoomsToTheStep) {
  Image image;
  nlohmann::json base;
  render("timeline", image, base, false, "", "_ruler0");
  EXPECT_EQ(base["step_first"].get<int64_t>(), -1);
  analysis::TraceModel model = analysis::load_traces(trace_.files);
  const auto& steps = model.processes.at(0).steps;
  ASSERT_GE(steps.size(), 4u);
  const auto& step = steps[2];
  const double start = base["timeline_start_ns"], end = base["timeline_end_ns"];
  const double area_x = base["timeline_area_x"], width = base["timeline_width"];
  const double x = area_x + (0.5 * double(step.start + step.end) - start) / (end - start) * width;
  const double y = base["step_ruler_y"];
  nlohmann::json layout;
  render("timeline", image, layout, false,
         "--input 'click " + std::to_string(x) + " " + std::to_string(y) + "'", "_ruler1");
  EXPECT_EQ(layout["step_first"].get<int64_t>(), step.step);
  EXPECT_EQ(layout["step_last"].get<int64_t>(), step.step);
  // Zoomed to the step with 2% margins.
  const double length = double(step.end - step.start);
  EXPECT_NEAR(layout["timeline_start_ns"].get<double>(), double(step.start) - 0.02 * length,
              0.01 * length);
  EXPECT_NEAR(layout["timeline_end_ns"].get<double>(), double(step.end) + 0.02 * length,
              0.01 * length);
}

// Opening rank 0 alone, then dropping both ranks' files on the window loads them together.
TEST_F(ViewerScreenshots, DroppedFilesOpenTogether) {
  Image image;
  nlohmann::json layout;
  std::vector<std::string> first_rank{trace_.files[0]};
  render("timeline", image, layout, false, "", "_one_rank", &first_rank);
  EXPECT_EQ(layout["ranks"].get<int>(), 1);
  render("comm", image, layout, false,
         "--input 'drop " + trace_.files[0] + " " + trace_.files[1] + "'", "_dropped", &first_rank);
  EXPECT_EQ(layout["files"].get<int>(), 2);
  EXPECT_EQ(layout["ranks"].get<int>(), 2);
  EXPECT_EQ(layout["comm_matrix"]["rows"].get<int>(), 2);
}

// Ctrl+O opens the file browser on the working directory; ticking both ranks' files and
// pressing "Open ticked" opens them together.
TEST_F(ViewerScreenshots, FileBrowserOpensTickedRanks) {
  Image image;
  nlohmann::json layout;
  std::vector<std::string> first_rank{trace_.files[0]};
  render("timeline", image, layout, false, "--input 'ctrl O'", "_browser", &first_rank);
  ASSERT_TRUE(layout["browser_open"].get<bool>());
  auto names = layout["browser_traces"].get<std::vector<std::string>>();
  ASSERT_EQ(names, (std::vector<std::string>{"sample.0.moetrace", "sample.1.moetrace"}));
  std::string script = "ctrl O";
  for (const auto& box : layout["browser_checkboxes"]) {
    script += "; click " + std::to_string(box[0].get<float>()) + " " +
              std::to_string(box[1].get<float>());
  }
  const auto& button = layout["browser_open_button"];
  script += "; click " + std::to_string(button[0].get<float>()) + " " +
            std::to_string(button[1].get<float>());
  render("timeline", image, layout, false, "--input '" + script + "'", "_browser_opened",
         &first_rank);
  EXPECT_FALSE(layout["browser_open"].get<bool>());
  EXPECT_EQ(layout["files"].get<int>(), 2);
  EXPECT_EQ(layout["ranks"].get<int>(), 2);
}

// Two runs (`moescope view BASE --against NEW_FOLDER`): the base's hot expert moved to another
// expert in the new run. The Compare tab shows both heatmaps on one scale and their difference (the
// new hot cell red, the old one blue), and both runs' step times on one chart; every number
// drawn is the analysis library's.
TEST_F(ViewerScreenshots, CompareTabShowsBothRunsAndTheirDifference) {
  testing::SampleTraceShape moved = shape_;
  moved.hot_expert = 3;
  moved.seed = 2;
  moved.step_ns = 3'000'000;  // 1.5x the base's step: the two lines are apart
  // Outside the suite's folder: the file browser test lists that folder's traces.
  const std::string other = directory_ + "_new";
  fs::create_directories(other);
  const testing::SampleTrace next = testing::write_sample_trace(other, moved);
  const std::string against = "--against " + other;  // a run's folder stands for its traces
  Image image;
  nlohmann::json layout;
  render("compare", image, layout, /*via_cli=*/true, against, "_two_runs");
  const analysis::TraceModel base_model = analysis::load_traces(trace_.files);
  const analysis::TraceModel next_model = analysis::load_traces(next.files);
  fs::remove_all(other);
  ASSERT_EQ(next_model.processes.size(), size_t(shape_.num_ranks));
  const analysis::ExpertLoadMatrix base_tokens = analysis::expert_load_matrix(base_model);
  const analysis::ExpertLoadMatrix next_tokens = analysis::expert_load_matrix(next_model);
  const auto& shown = layout["shown"];
  ASSERT_EQ(shown["compare_layers"].get<std::vector<uint32_t>>(), base_tokens.layer_ids);
  const auto delta = shown["compare_delta"].get<std::vector<double>>();
  ASSERT_EQ(delta.size(), size_t(shape_.num_layers) * size_t(shape_.num_experts));
  for (int row = 0; row < shape_.num_layers; ++row) {
    for (int expert = 0; expert < shape_.num_experts; ++expert) {
      const double expected = next_tokens.at(row, expert) / double(next_tokens.num_steps) -
                              base_tokens.at(row, expert) / double(base_tokens.num_steps);
      EXPECT_NEAR(delta[size_t(row * shape_.num_experts + expert)], expected, 1e-9);
    }
  }
  const auto& heatmaps = layout["compare_heatmaps"];
  ASSERT_EQ(heatmaps.size(), 3u);
  for (const auto& heatmap : heatmaps) {
    EXPECT_EQ(heatmap["rows"].get<int>(), shape_.num_layers);
    EXPECT_EQ(heatmap["columns"].get<int>(), shape_.num_experts);
  }
  const GridLayout base_grid = grid_from(heatmaps[0]), next_grid = grid_from(heatmaps[1]),
                   delta_grid = grid_from(heatmaps[2]);
  EXPECT_LT(base_grid.cell_x(shape_.num_experts), next_grid.left) << "side by side";
  EXPECT_LT(next_grid.cell_x(shape_.num_experts), delta_grid.left);
  // One colour scale: the hotter of the two hot cells has the top colour, and each run's hot
  // cell is far brighter than every other cell of its heatmap.
  const int layer = shape_.hot_layer;
  const Rgb base_hot = image.at(base_grid.centre_x(shape_.hot_expert), base_grid.centre_y(layer));
  const Rgb next_hot = image.at(next_grid.centre_x(moved.hot_expert), next_grid.centre_y(layer));
  EXPECT_TRUE(
      near(brightness(base_hot) > brightness(next_hot) ? base_hot : next_hot, heat_colour(1.0), 3));
  for (int row = 0; row < shape_.num_layers; ++row) {
    for (int expert = 0; expert < shape_.num_experts; ++expert) {
      if (row == layer && expert == shape_.hot_expert) continue;
      EXPECT_LT(brightness(image.at(base_grid.centre_x(expert), base_grid.centre_y(row))),
                brightness(base_hot) - 60.0);
    }
    for (int expert = 0; expert < shape_.num_experts; ++expert) {
      if (row == layer && expert == moved.hot_expert) continue;
      EXPECT_LT(brightness(image.at(next_grid.centre_x(expert), next_grid.centre_y(row))),
                brightness(next_hot) - 60.0);
    }
  }
  const Rgb gained = image.at(delta_grid.centre_x(moved.hot_expert), delta_grid.centre_y(layer));
  const Rgb lost = image.at(delta_grid.centre_x(shape_.hot_expert), delta_grid.centre_y(layer));
  EXPECT_GT(gained.r, gained.b + 100) << "more tokens: red";
  EXPECT_GT(lost.b, lost.r + 100) << "fewer tokens: blue";

  // The step chart: both series are the analysis's per-step time, both lines are drawn.
  const analysis::RunDiff diff = analysis::diff_runs(base_model, next_model);
  EXPECT_EQ(shown["compare_base_step_ms"].get<std::vector<double>>(), diff.base.step_ms);
  EXPECT_EQ(shown["compare_next_step_ms"].get<std::vector<double>>(), diff.next.step_ms);
  ASSERT_EQ(diff.base.step_ms.size(), size_t(shape_.num_steps));
  EXPECT_GT(diff.next.step_ms.back(), diff.base.step_ms.back() * 1.3);
  const auto chart = layout["compare_chart"].get<std::vector<float>>();
  ASSERT_EQ(chart.size(), 4u);
  auto count_in_chart = [&](Rgb colour) {
    size_t n = 0;
    for (float y = chart[1]; y < chart[1] + chart[3]; y += 1.0f) {
      for (float x = chart[0]; x < chart[0] + chart[2]; x += 1.0f) {
        n += near(image.at(x, y), colour, 40) ? 1 : 0;
      }
    }
    return n;
  };
  EXPECT_GT(count_in_chart({110, 170, 255}), 100u) << "the base line";
  EXPECT_GT(count_in_chart({255, 150, 60}), 100u) << "the new line";
}

TEST_F(ViewerScreenshots, MoescopeViewExecsTheViewer) {
  Image image;
  nlohmann::json layout;
  render("experts", image, layout, /*via_cli=*/true);
  EXPECT_EQ(layout["expert_heatmap"]["columns"].get<int>(), shape_.num_experts);
}

}  // namespace
}  // namespace moescope::viewer
