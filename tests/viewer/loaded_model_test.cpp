// The view-model on a real loaded model (the synthetic 2-rank trace with one hot expert):
// the timeline index, search with next/previous order, click hit-testing through the track and
// lane layout, finding -> timeline jump, and the panel aggregates.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/viewer/computed_for.h"
#include "moescope/viewer/event_description.h"
#include "moescope/viewer/finding_focus.h"
#include "moescope/viewer/loaded_trace.h"
#include "moescope/viewer/panel_data.h"
#include "moescope/viewer/timeline_index.h"
#include "sample_trace_writer.h"

namespace moescope::viewer {
namespace {

class LoadedSample : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* build = std::getenv("MOESCOPE_BUILD_DIR");
    std::string directory = std::string(build ? build : "/tmp") + "/tests/viewer_loaded_model_" +
                            std::to_string(getpid());  // CTest may run tests in parallel
    std::filesystem::create_directories(directory);
    trace_ = testing::write_sample_trace(directory, shape_);
    model_ = new analysis::TraceModel(analysis::load_traces(trace_.files));
    index_ = new TimelineIndex(build_timeline_index(*model_));
    directory_ = directory;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(directory_);
    delete index_;
    delete model_;
  }
  static inline std::string directory_;
  static inline testing::SampleTraceShape shape_;
  static inline testing::SampleTrace trace_;
  static inline analysis::TraceModel* model_ = nullptr;
  static inline TimelineIndex* index_ = nullptr;
};

TEST_F(LoadedSample, IndexHasThreadStreamCommMemoryAndCounterTracksPerRank) {
  ASSERT_TRUE(model_->errors.empty()) << model_->errors.front().to_string();
  ASSERT_EQ(model_->processes.size(), 2u);
  int threads = 0, streams = 0, comms = 0, plots = 0;
  for (const TimelineTrack& track : index_->tracks) {
    switch (track.kind) {
      case TimelineTrackKind::kThread:
        ++threads;
        EXPECT_EQ(track.lanes.size(), 4u) << "train_step > forward/backward > layer > phase";
        break;
      case TimelineTrackKind::kGpuStream:
        ++streams;
        EXPECT_EQ(track.lanes.size(), 1u) << "kernels on one stream do not overlap";
        break;
      case TimelineTrackKind::kCommunicator:
        ++comms;
        break;
      default:
        ++plots;
    }
  }
  EXPECT_EQ(threads, 2);
  EXPECT_EQ(streams, 2);
  EXPECT_EQ(comms, 2);
  EXPECT_EQ(plots, 4);  // memory + loss counter per rank
  EXPECT_EQ(index_->num_spans, trace_.timeline_events);
  EXPECT_EQ(index_->tracks.front().label.rfind("rank 0 | thread main", 0), 0u);
}

// The first screen: the timeline opens on the steps, and a counter that never changes starts
// collapsed (its header says why) while one that changes is drawn.
TEST_F(LoadedSample, IndexKnowsTheStepsAndCollapsesOnlyConstantCounters) {
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& process : model_->processes) {
    ASSERT_FALSE(process.steps.empty());
    first = std::min(first, process.steps.front().start);
    last = std::max(last, process.steps.back().end);
  }
  EXPECT_EQ(index_->steps_begin_ns, first);
  EXPECT_EQ(index_->steps_end_ns, last);
  for (const TimelineTrack& track : index_->tracks) {
    if (track.kind != TimelineTrackKind::kCounter) continue;
    EXPECT_FALSE(track.collapsed) << track.label << ": the loss changes every step";
    EXPECT_EQ(track.label.find("(constant)"), std::string::npos) << track.label;
  }

  analysis::TraceModel model;
  analysis::ProcessTrack process;
  analysis::CounterTrack flat, moving;
  flat.name = model.strings.intern("dispatch buffer bytes");
  flat.times = {10, 20, 30};
  flat.values = {0, 0, 0};
  moving.name = model.strings.intern("tokens");
  moving.times = {10, 20, 30};
  moving.values = {0, 5, 0};
  process.counters = {flat, moving};
  model.processes.push_back(process);
  const TimelineIndex index = build_timeline_index(model);
  ASSERT_EQ(index.tracks.size(), 2u);
  EXPECT_TRUE(index.tracks[0].collapsed);
  EXPECT_NE(index.tracks[0].label.find("dispatch buffer bytes (constant)"), std::string::npos);
  EXPECT_FALSE(index.tracks[1].collapsed);
  EXPECT_EQ(index.steps_begin_ns, 0);  // no steps: the timeline opens on the whole trace
  EXPECT_EQ(index.steps_end_ns, 0);
}

TEST_F(LoadedSample, SearchFindsEveryMatchInTimeOrder) {
  auto matches = search_events(*model_, *index_, "GROUPED_gemm");
  size_t expected = static_cast<size_t>(shape_.num_ranks * shape_.num_steps * shape_.num_layers *
                                        2 * shape_.kernels_per_layer);
  ASSERT_EQ(matches.size(), expected);
  int64_t previous = INT64_MIN;
  for (const EventRef& ref : matches) {
    EventSummary summary = summarize_event(*model_, *index_, ref);
    EXPECT_EQ(model_->name(summary.name), "grouped_gemm_kernel");
    EXPECT_GE(summary.start_ns, previous);
    previous = summary.start_ns;
  }
  EXPECT_TRUE(search_events(*model_, *index_, "no such name").empty());
  EXPECT_EQ(search_events(*model_, *index_, "moe_layer 3").size(),
            static_cast<size_t>(shape_.num_ranks * shape_.num_steps * 2));
}

TEST_F(LoadedSample, ClickingACommOpSelectsIt) {
  // The 5th all-to-all of rank 1, zoomed so it is a few dozen pixels wide.
  auto matches = search_events(*model_, *index_, "all_to_all");
  EventRef target;
  int seen = 0;
  for (const EventRef& ref : matches) {
    if (model_->processes[index_->tracks[static_cast<size_t>(ref.track)].process].rank == 1 &&
        ++seen == 5) {
      target = ref;
    }
  }
  ASSERT_TRUE(target.valid());
  EventSummary summary = summarize_event(*model_, *index_, target);
  TimeAxis axis(static_cast<double>(model_->begin), static_cast<double>(model_->end), 1200.0);
  axis.show_range(static_cast<double>(summary.start_ns) - 200000.0,
                  static_cast<double>(summary.end_ns) + 200000.0, 0.0);
  TrackMetrics metrics;
  auto shapes = index_->shapes();
  auto rows = layout_tracks(shapes, metrics);
  double click_x = axis.time_to_x(0.5 * static_cast<double>(summary.start_ns + summary.end_ns));
  float click_y = rows[static_cast<size_t>(target.track)].content_top + metrics.lane_height * 0.5f;
  TrackHit hit = hit_test_tracks(rows, shapes, metrics, click_y);
  ASSERT_EQ(hit.track, target.track);
  ASSERT_EQ(hit.lane, target.lane);
  int64_t slot = hit_test_lane(
      index_->tracks[static_cast<size_t>(hit.track)].lanes[static_cast<size_t>(hit.lane)],
      axis.x_to_time(click_x), 3.0 * axis.ns_per_px());
  EXPECT_EQ(slot, target.slot);
  // The same click with the track collapsed hits its header, not the op.
  shapes[static_cast<size_t>(target.track)].collapsed = true;
  rows = layout_tracks(shapes, metrics);
  EXPECT_EQ(hit_test_tracks(rows, shapes, metrics, click_y).lane, -1);
}

// Memory in use is one stacked track per rank: each frame point names its sample, whose
// categories stack (expert weights, optimizer state, activations ... in category order) up to
// the total in use.
TEST_F(LoadedSample, MemoryTrackStacksTheCategoriesUpToTheTotal) {
  TimeAxis axis(static_cast<double>(model_->begin), static_cast<double>(model_->end), 1200.0);
  TrackMetrics metrics;
  const auto rows = layout_tracks(index_->shapes(), metrics);
  TimelineFrame frame;
  build_timeline_frame(*model_, *index_, rows, 0.0f, 1e9f, axis, 3.0, frame);
  int memory_runs = 0;
  size_t most_bands = 0;
  for (const PlotRun& run : frame.plot_runs) {
    const TimelineTrack& track = index_->tracks[run.track];
    if (track.kind != TimelineTrackKind::kMemory) continue;
    ++memory_runs;
    const analysis::MemoryUsage& usage = model_->processes[track.process].memory_usage;
    ASSERT_GT(run.num_points, 100u);
    for (uint32_t i = run.first_point; i < run.first_point + run.num_points; ++i) {
      const PlotPoint& point = frame.points[i];
      ASSERT_LT(point.sample, usage.total.size());
      EXPECT_EQ(point.value, static_cast<double>(usage.total[point.sample]));
      const auto tops = memory_stack_tops(usage, point.sample);
      EXPECT_TRUE(std::is_sorted(tops.begin(), tops.end()));
      EXPECT_EQ(tops.back(), point.value) << "the stack's top is the total in use";
      size_t bands = 0;
      for (size_t c = 0; c < tops.size(); ++c) bands += tops[c] > (c ? tops[c - 1] : 0.0);
      most_bands = std::max(most_bands, bands);
    }
  }
  EXPECT_EQ(memory_runs, 2) << "one memory track per rank";
  EXPECT_GE(most_bands, 3u) << "weights, optimizer state and activations stacked";
}

TEST_F(LoadedSample, ImbalanceFindingJumpsToItsLayerStepsAndTime) {
  std::vector<analysis::Finding> findings = analysis::build_report(*model_).findings;
  const analysis::Finding* imbalance = nullptr;
  for (const analysis::Finding& finding : findings) {
    if (finding.kind == "expert_imbalance") imbalance = &finding;
  }
  ASSERT_NE(imbalance, nullptr);
  EXPECT_EQ(imbalance->where.layer, shape_.hot_layer);
  ASSERT_FALSE(imbalance->where.experts.empty());
  EXPECT_EQ(imbalance->where.experts.front(), static_cast<uint32_t>(shape_.hot_expert));
  TimeFocus focus = finding_time_focus(*model_, *imbalance);
  TimeAxis axis(static_cast<double>(model_->begin), static_cast<double>(model_->end), 1000.0);
  axis.show_range(focus.begin_ns, focus.end_ns, 0.05);
  EXPECT_LE(axis.start_ns(), focus.begin_ns);
  EXPECT_GE(axis.end_ns(), focus.end_ns);
  EXPECT_LT(axis.duration_ns(), 1.2 * (focus.end_ns - focus.begin_ns) + 1.0);
  // A finding on steps 2..3 of rank 1 with no time window of its own spans those steps there.
  analysis::Finding steps_only;
  steps_only.where.ranks = {1};
  steps_only.where.first_step = 2;
  steps_only.where.last_step = 3;
  focus = finding_time_focus(*model_, steps_only);
  const auto& steps = model_->processes[1].steps;
  EXPECT_EQ(focus.begin_ns, static_cast<double>(steps[2].start));
  EXPECT_EQ(focus.end_ns, static_cast<double>(steps[3].end));
  EXPECT_EQ(focus.rank, 1);
}

TEST_F(LoadedSample, PanelAggregatesMatchWhatWasWritten) {
  analysis::ExpertLoadMatrix all = analysis::expert_load_matrix(*model_, {});
  ASSERT_EQ(all.num_layers(), shape_.num_layers);
  ASSERT_EQ(all.num_experts, shape_.num_experts);
  EXPECT_EQ(all.num_steps, shape_.num_steps);
  EXPECT_EQ(all.at(shape_.hot_layer, shape_.hot_expert), all.max_tokens);
  ASSERT_FALSE(all.predicted.empty());
  analysis::ExpertLoadMatrix rank0 = analysis::expert_load_matrix(*model_, {-1, -1, 0});
  analysis::ExpertLoadMatrix rank1 = analysis::expert_load_matrix(*model_, {-1, -1, 1});
  EXPECT_DOUBLE_EQ(all.at(1, 3), rank0.at(1, 3) + rank1.at(1, 3));
  analysis::ExpertLoadMatrix one_step = analysis::expert_load_matrix(*model_, {2, 2, -1});
  EXPECT_EQ(one_step.num_steps, 1);
  EXPECT_LT(one_step.max_tokens, all.max_tokens);

  const analysis::CommAnalysis comm = analysis::analyze_communication(*model_, {});
  ASSERT_EQ(comm.all_to_all.size(), 1u);
  const analysis::AllToAllMatrix& matrix = comm.all_to_all[0];
  ASSERT_EQ(matrix.num_ranks, 2);
  double ops_per_rank =
      shape_.num_steps * shape_.num_layers * 2 * 2;  // 2 passes x dispatch+combine
  EXPECT_DOUBLE_EQ(matrix.at(0, 1), ops_per_rank * 3 * 1048576.0);
  EXPECT_DOUBLE_EQ(matrix.at(1, 0), ops_per_rank * (1048576.0 + 4096.0));
  EXPECT_EQ(matrix.ops_by_rank[0], static_cast<uint32_t>(ops_per_rank));
  EXPECT_GT(matrix.bandwidth_gbps(0), 0.0);

  analysis::RankMemory peak = analysis::analyze_rank_memory(model_->processes[0], 3);
  EXPECT_EQ(peak.peak_bytes, static_cast<int64_t>((512 + 256 + 24 + 28 + 32 + 36) << 20));
  EXPECT_EQ(peak.live_at_peak, 6u);
  ASSERT_EQ(peak.largest_at_peak.size(), 3u);
  EXPECT_EQ(peak.largest_at_peak[0].bytes, 512ll << 20);

  auto kernels = kernel_statistics(*model_);
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(model_->name(kernels[0].name), "grouped_gemm_kernel");  // most total time first
  EXPECT_EQ(kernels[0].count,
            static_cast<uint64_t>(shape_.num_ranks * shape_.num_steps * shape_.num_layers * 2 *
                                  shape_.kernels_per_layer));
  EXPECT_LE(kernels[0].p50_ns, kernels[0].p99_ns);
}

}  // namespace
}  // namespace moescope::viewer

namespace moescope::viewer {
namespace {

TEST_F(LoadedSample, ArrowsLinkLaunchesToTheirKernels) {
  auto kernels = search_events(*model_, *index_, "grouped_gemm_kernel");
  ASSERT_FALSE(kernels.empty());
  auto arrows = arrows_of_event(*model_, *index_, kernels.front(), 100);
  ASSERT_EQ(arrows.size(), 1u) << "a kernel shows the call that launched it";
  EventSummary kernel = summarize_event(*model_, *index_, kernels.front());
  EXPECT_EQ(arrows[0].to_time, kernel.start_ns);
  EXPECT_EQ(arrows[0].from.kind, analysis::TrackKind::kThread);
  EXPECT_LT(arrows[0].from_time, arrows[0].to_time);
  // The first "experts" span launches kernels_per_layer grouped GEMMs.
  auto experts = search_events(*model_, *index_, "experts");
  ASSERT_FALSE(experts.empty());
  arrows = arrows_of_event(*model_, *index_, experts.front(), 100);
  EXPECT_EQ(arrows.size(), static_cast<size_t>(shape_.kernels_per_layer));
  // The whole first step launches (router + gemms + combine) per layer and pass.
  auto steps = search_events(*model_, *index_, "train_step");
  arrows = arrows_of_event(*model_, *index_, steps.front(), 10000);
  EXPECT_EQ(arrows.size(),
            static_cast<size_t>(shape_.num_layers * 2 * (shape_.kernels_per_layer + 2)));
  EXPECT_EQ(arrows_of_event(*model_, *index_, steps.front(), 5).size(), 5u);
}

}  // namespace
}  // namespace moescope::viewer

namespace moescope::viewer {
namespace {

// A trace of several chunks per rank (the preview stops at a chunk boundary).
testing::SampleTrace write_long_sample(const std::string& name) {
  const char* build = std::getenv("MOESCOPE_BUILD_DIR");
  std::string directory = std::string(build ? build : "/tmp") + "/tests/viewer_" + name + "_" +
                          std::to_string(getpid());
  std::filesystem::create_directories(directory);
  testing::SampleTraceShape shape;
  shape.num_steps = 1200;
  return testing::write_sample_trace(directory, shape);
}

std::unique_ptr<LoadedTrace> wait_for_result(TraceLoadingJob& job) {
  for (int i = 0; i < 60'000 && !job.done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return job.take_result();
}

TEST(TraceLoadingJob, ShowsTheBeginningWhileTheWholeTraceLoads) {
  testing::SampleTrace sample = write_long_sample("preview");
  const analysis::TraceModel whole_model = analysis::load_traces(sample.files);
  const uint64_t total = whole_model.total_events;
  TraceLoadingJob job(sample.files, total / 4);
  std::unique_ptr<LoadedTrace> whole = wait_for_result(job);
  std::unique_ptr<LoadedTrace> preview = job.take_preview();
  ASSERT_NE(preview, nullptr);
  ASSERT_NE(whole, nullptr);
  EXPECT_TRUE(preview->preview);
  EXPECT_GE(preview->model.total_events, total / 4);
  EXPECT_LT(preview->model.total_events, total * 3 / 4);
  ASSERT_EQ(preview->model.processes.size(), 2u);
  for (const auto& process : preview->model.processes) EXPECT_TRUE(process.truncated);
  // The preview is a drawable trace of its own: tracks, steps, the beginning of the time range.
  // Streams whose first chunk lies beyond the point where it stopped (here the GPU's) appear
  // with the whole trace.
  ASSERT_FALSE(preview->timeline.tracks.empty());
  EXPECT_LE(preview->timeline.tracks.size(), whole->timeline.tracks.size());
  for (uint32_t p = 0; p < 2; ++p) {
    const auto& first = preview->model.processes[p].threads.at(0).spans;
    const auto& all = whole->model.processes[p].threads.at(0).spans;
    ASSERT_GT(first.size(), 100u);
    ASSERT_LT(first.size(), all.size());
    for (size_t i = 0; i < 100; ++i) EXPECT_EQ(first[i].start, all[i].start);
  }
  EXPECT_FALSE(preview->steps.empty());
  EXPECT_LT(preview->steps.size(), whole->steps.size());
  EXPECT_EQ(preview->model.begin, whole->model.begin);
  EXPECT_LT(preview->model.end, whole->model.end);
  EXPECT_FALSE(whole->preview);
  EXPECT_EQ(whole->model.total_events, total);
  for (const auto& process : whole->model.processes) EXPECT_FALSE(process.truncated);
  EXPECT_EQ(job.take_preview(), nullptr);  // taken once
  std::filesystem::remove_all(std::filesystem::path(sample.files[0]).parent_path());
}

TEST(TraceLoadingJob, ReadsASmallTraceOnce) {
  testing::SampleTrace sample = write_long_sample("no_preview");
  const uint64_t total = analysis::load_traces(sample.files).total_events;
  TraceLoadingJob job(sample.files, total * 2);
  std::unique_ptr<LoadedTrace> whole = wait_for_result(job);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(job.take_preview(), nullptr);
  EXPECT_FALSE(whole->preview);
  EXPECT_EQ(whole->model.total_events, total);
  std::filesystem::remove_all(std::filesystem::path(sample.files[0]).parent_path());
}

// Issue 33: the loading thread ends with a result for every input `report` survives, and the
// result carries the read problems the viewer shows (the menu bar's "read problems", or the
// load error when nothing was readable).
TEST(TraceLoadingJob, HostileKinetoFilesLoadWithTheirErrors) {
  const std::string directory = std::string("/tmp/viewer_hostile_") + std::to_string(getpid());
  std::filesystem::create_directories(directory);
  const std::string hostile = directory + "/hostile.json";
  std::FILE* file = std::fopen(hostile.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs(R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"ok","ts":1.0,"dur":2.0},)"
             R"({"ph":"X","cat":"cpu_op","name":5,"ts":2.0},)"
             R"({"ph":"X","cat":"cpu_op","name":"huge","ts":1e300,"dur":1.0}]})",
             file);
  std::fclose(file);
  TraceLoadingJob job({hostile}, 0);
  std::unique_ptr<LoadedTrace> loaded = wait_for_result(job);
  ASSERT_NE(loaded, nullptr);
  ASSERT_EQ(loaded->model.processes.size(), 1u);
  std::string errors;
  for (const auto& error : loaded->model.errors) errors += error.to_string() + "\n";
  EXPECT_NE(errors.find("traceEvents[1]"), std::string::npos) << errors;
  EXPECT_NE(errors.find("traceEvents[2]"), std::string::npos) << errors;

  const std::string garbage = directory + "/garbage.json";
  file = std::fopen(garbage.c_str(), "w");
  std::fputs(R"({"traceEvents": 7})", file);
  std::fclose(file);
  TraceLoadingJob garbage_job({garbage}, 0);
  std::unique_ptr<LoadedTrace> nothing = wait_for_result(garbage_job);
  ASSERT_NE(nothing, nullptr);
  EXPECT_TRUE(nothing->model.processes.empty());
  ASSERT_FALSE(nothing->model.errors.empty());
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace moescope::viewer

namespace moescope::viewer {
namespace {

TEST_F(LoadedSample, HeatmapCellTellsTokensShareAndPrediction) {
  analysis::ExpertLoadMatrix all = analysis::expert_load_matrix(*model_, {});
  const int row = shape_.hot_layer;  // layers 0..num_layers-1 are rows 0..
  HeatmapCell hot = heatmap_cell(all, row, shape_.hot_expert);
  EXPECT_EQ(hot.layer, static_cast<uint32_t>(shape_.hot_layer));
  EXPECT_EQ(hot.expert, shape_.hot_expert);
  EXPECT_EQ(hot.tokens, all.max_tokens);
  EXPECT_NEAR(hot.share, hot.tokens / all.layer_total(row), 1e-12);
  EXPECT_NEAR(hot.over_mean, hot.tokens / (all.layer_total(row) / shape_.num_experts), 1e-12);
  // The hot expert gets 6x the tokens of an average one (200..319 each): share > 1 / experts.
  EXPECT_GT(hot.over_mean, 3.0);
  // The sample records, per rank, a forecast of 0.9x that rank's load. A forecast is one rank's
  // copy (a real balancer's is the same on every rank): rank 0's over every rank, each rank's
  // own under a rank filter.
  ASSERT_TRUE(hot.has_prediction);
  for (int32_t rank : {0, 1}) {
    const analysis::ExpertLoadMatrix one = analysis::expert_load_matrix(*model_, {-1, -1, rank});
    const HeatmapCell cell = heatmap_cell(one, row, shape_.hot_expert);
    ASSERT_TRUE(cell.has_prediction);
    EXPECT_NEAR(cell.predicted, 0.9 * cell.tokens, 1e-3 * cell.tokens) << "rank " << rank;
    if (rank == 0) {
      EXPECT_DOUBLE_EQ(hot.predicted, cell.predicted);
    }
  }
  HeatmapCell outside = heatmap_cell(all, all.num_layers(), 0);
  EXPECT_EQ(outside.tokens, 0.0);
}

TEST_F(LoadedSample, StatisticsHoldEveryKernelAndSortByEachColumn) {
  auto kernels = kernel_statistics(*model_);
  // Recompute one row from the model: count, total, mean and nearest-rank p50/p99.
  std::vector<double> durations;
  analysis::StringId gemm = model_->strings.find("grouped_gemm_kernel");
  for (const auto& process : model_->processes) {
    for (const auto& stream : process.gpu_streams) {
      for (const auto& op : stream.ops) {
        if (op.name == gemm) durations.push_back(static_cast<double>(op.duration()));
      }
    }
  }
  std::sort(durations.begin(), durations.end());
  auto row = std::find_if(kernels.begin(), kernels.end(),
                          [&](const NameStatistics& r) { return r.name == gemm; });
  ASSERT_NE(row, kernels.end());
  double total = 0;
  for (double d : durations) total += d;
  EXPECT_EQ(row->count, durations.size());
  EXPECT_DOUBLE_EQ(row->total_ns, total);
  EXPECT_DOUBLE_EQ(row->mean_ns, total / double(durations.size()));
  auto nearest_rank = [&](double p) {
    size_t rank = static_cast<size_t>(std::ceil(p * double(durations.size())));
    return durations[rank - 1];
  };
  EXPECT_DOUBLE_EQ(row->p50_ns, nearest_rank(0.5));
  EXPECT_DOUBLE_EQ(row->p99_ns, nearest_rank(0.99));
  EXPECT_DOUBLE_EQ(row->max_ns, durations.back());

  auto ranges = range_statistics(*model_);
  ASSERT_GT(ranges.size(), 3u);
  using Column = StatisticsColumn;
  for (Column column :
       {Column::kName, Column::kCount, Column::kTotal, Column::kMean, Column::kP50, Column::kP99}) {
    for (bool ascending : {true, false}) {
      std::vector<size_t> order = sorted_statistics(*model_, ranges, column, ascending);
      ASSERT_EQ(order.size(), ranges.size());
      std::vector<size_t> seen = order;
      std::sort(seen.begin(), seen.end());
      for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);  // a permutation
      for (size_t i = 1; i < order.size(); ++i) {
        const NameStatistics& a = ranges[order[i - 1]];
        const NameStatistics& b = ranges[order[i]];
        double ka = 0, kb = 0;
        switch (column) {
          case Column::kName: {
            int compare = model_->name(a.name).compare(model_->name(b.name));
            EXPECT_TRUE(ascending ? compare <= 0 : compare >= 0);
            continue;
          }
          case Column::kCount:
            ka = double(a.count), kb = double(b.count);
            break;
          case Column::kTotal:
            ka = a.total_ns, kb = b.total_ns;
            break;
          case Column::kMean:
            ka = a.mean_ns, kb = b.mean_ns;
            break;
          case Column::kP50:
            ka = a.p50_ns, kb = b.p50_ns;
            break;
          case Column::kP99:
            ka = a.p99_ns, kb = b.p99_ns;
            break;
        }
        EXPECT_TRUE(ascending ? ka <= kb : ka >= kb) << "column " << int(column);
      }
    }
  }
}

TEST_F(LoadedSample, SearchNextAndPreviousWalkTheMatchesInTimeOrder) {
  auto matches = search_events(*model_, *index_, "combine");
  ASSERT_GT(matches.size(), 2u);
  // Enter / ">" from no selection: first match, then onwards, wrapping at the end.
  int at = step_match(-1, matches.size(), false);
  EXPECT_EQ(at, 0);
  int64_t last_start = INT64_MIN;
  for (size_t i = 1; i < matches.size(); ++i) {
    int next = step_match(at, matches.size(), false);
    EXPECT_EQ(next, at + 1);
    int64_t start = summarize_event(*model_, *index_, matches[size_t(next)]).start_ns;
    EXPECT_GE(start, last_start);
    last_start = start;
    at = next;
  }
  EXPECT_EQ(step_match(at, matches.size(), false), 0);
  // "<" goes back and wraps to the last match.
  EXPECT_EQ(step_match(0, matches.size(), true), int(matches.size()) - 1);
  EXPECT_EQ(step_match(5, matches.size(), true), 4);
  EXPECT_EQ(step_match(-1, matches.size(), true), int(matches.size()) - 1);
  EXPECT_EQ(step_match(3, 0, false), -1);
}

// What the hover tooltip (short form) and the details pane (long form) say about a kernel, an
// all-to-all and a span.
TEST_F(LoadedSample, TooltipsAndDetailsDescribeTheEvent) {
  auto joined = [](const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    return text;
  };
  auto kernels = search_events(*model_, *index_, "grouped_gemm_kernel");
  ASSERT_FALSE(kernels.empty());
  EventSummary kernel = summarize_event(*model_, *index_, kernels.front());
  char duration[32];
  format_duration(double(kernel.end_ns - kernel.start_ns), duration, sizeof(duration));
  std::vector<std::string> tooltip = describe_event(*model_, *index_, kernels.front(), false);
  ASSERT_GE(tooltip.size(), 3u);
  EXPECT_EQ(tooltip[0], "grouped_gemm_kernel");
  EXPECT_NE(tooltip[1].find(std::string("duration ") + duration), std::string::npos) << tooltip[1];
  EXPECT_NE(tooltip[1].find("rank 0"), std::string::npos) << tooltip[1];
  std::string text = joined(tooltip);
  EXPECT_NE(text.find("kernel   correlation"), std::string::npos) << text;
  EXPECT_NE(text.find("grid 132 x 1 x 1   block 256 x 1 x 1   96 regs"), std::string::npos) << text;
  EXPECT_EQ(text.find("launched by"), std::string::npos) << "the tooltip is the short form";
  text = joined(describe_event(*model_, *index_, kernels.front(), true));
  EXPECT_NE(text.find("launched by cudaLaunchKernel"), std::string::npos) << text;

  auto all_to_alls = search_events(*model_, *index_, "all_to_all");
  ASSERT_FALSE(all_to_alls.empty());
  text = joined(describe_event(*model_, *index_, all_to_alls.front(), true));
  // Rank 0 sends 1 MiB to rank 0 and 3 MiB to rank 1 (the hot expert's rank).
  EXPECT_NE(text.find("all_to_all   4194304 bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 of 2"), std::string::npos) << text;
  EXPECT_NE(text.find("bytes to each rank: 1048576 3145728"), std::string::npos) << text;

  auto routers = search_events(*model_, *index_, "router");
  EventRef span;
  for (const EventRef& ref : routers) {
    if (index_->tracks[size_t(ref.track)].kind == TimelineTrackKind::kThread) {
      span = ref;
      break;
    }
  }
  ASSERT_TRUE(span.valid());
  text = joined(describe_event(*model_, *index_, span, true));
  EXPECT_NE(text.find("router\n"), std::string::npos) << text;
  EXPECT_NE(text.find("depth 3"), std::string::npos) << text;  // step > pass > layer > router
  EXPECT_NE(text.find("parent: moe_layer 0"), std::string::npos) << text;
  EXPECT_TRUE(describe_event(*model_, *index_, EventRef{}, true).empty());
}

// The imbalance plot: max/mean per layer and step, the same numbers as the heatmap of that one
// step; the hot layer stands out; the rebalancing decision it marks is in the model.
TEST_F(LoadedSample, ImbalanceOverStepsMatchesTheHeatmapOfEachStep) {
  ImbalanceSeries series = imbalance_series(analysis::analyze_expert_load(*model_));
  ASSERT_EQ(series.layer_ids.size(), static_cast<size_t>(shape_.num_layers));
  ASSERT_EQ(series.steps, analysis::known_steps(*model_));
  ASSERT_EQ(series.steps.size(), static_cast<size_t>(shape_.num_steps));
  for (size_t column = 0; column < series.steps.size(); ++column) {
    const int64_t step = series.steps[column];
    analysis::ExpertLoadMatrix one = analysis::expert_load_matrix(*model_, {step, step, -1});
    for (int row = 0; row < one.num_layers(); ++row) {
      double max = 0;
      for (int e = 0; e < one.num_experts; ++e) max = std::max(max, one.at(row, e));
      const double expected = max / (one.layer_total(row) / one.num_experts);
      EXPECT_NEAR(series.per_layer[size_t(row)][column], expected, 1e-9)
          << "layer row " << row << " step " << step;
      // The hot expert gets 6x its share: about 6 / (63 + 6) x 64 = 5.6x the mean.
      if (row == shape_.hot_layer) {
        EXPECT_GT(series.per_layer[size_t(row)][column], 4.0);
      } else {
        EXPECT_LT(series.per_layer[size_t(row)][column], 2.0);
      }
    }
  }
  EXPECT_DOUBLE_EQ(series.max_value,
                   *std::max_element(series.per_layer[size_t(shape_.hot_layer)].begin(),
                                     series.per_layer[size_t(shape_.hot_layer)].end()));
  ASSERT_FALSE(model_->rebalances.empty());
  EXPECT_EQ(model_->rebalances[0].step, shape_.num_steps / 2);
  EXPECT_EQ(model_->rebalances[0].layer, static_cast<uint32_t>(shape_.hot_layer));
}

TEST_F(LoadedSample, StepWindowCoversTheSelectedSteps) {
  const analysis::ProcessTrack& process = model_->processes[0];
  ASSERT_GE(process.steps.size(), 4u);
  analysis::TimeWindow window = analysis::step_window(*model_, process, {});
  EXPECT_EQ(window.begin, model_->begin);
  EXPECT_EQ(window.end, model_->end);
  window = analysis::step_window(*model_, process, {2, 3, -1});
  EXPECT_EQ(window.begin, process.steps[2].start);
  EXPECT_EQ(window.end, process.steps[3].end);
  window = analysis::step_window(*model_, process, {1000, 1000, -1});  // no such step: all
  EXPECT_EQ(window.begin, model_->begin);
}

TEST_F(LoadedSample, CommMatrixCoversTheSelectedStepsOnly) {
  auto only_matrix = [&](const analysis::StepRankFilter& filter) {
    analysis::CommAnalysis comm = analysis::analyze_communication(*model_, filter);
    EXPECT_EQ(comm.all_to_all.size(), 1u);
    return comm.all_to_all.at(0);
  };
  const analysis::AllToAllMatrix all = only_matrix({});
  const analysis::AllToAllMatrix one = only_matrix({2, 2, -1});
  const analysis::AllToAllMatrix two = only_matrix({2, 3, -1});
  const double ops_per_step = shape_.num_layers * 2 * 2;  // passes x (dispatch + combine)
  ASSERT_EQ(one.num_ranks, 2);
  EXPECT_EQ(one.ops_by_rank[0], static_cast<uint32_t>(ops_per_step));
  EXPECT_EQ(two.ops_by_rank[0], static_cast<uint32_t>(2 * ops_per_step));
  EXPECT_DOUBLE_EQ(one.at(0, 1), ops_per_step * 3 * 1048576.0);
  EXPECT_DOUBLE_EQ(all.at(0, 1), shape_.num_steps * one.at(0, 1));
  EXPECT_GT(one.bandwidth_gbps(0), 0.0);
}

// The panels' caches: an aggregate is recomputed when the step range or rank it was computed
// for changes, or another trace is opened (also one of the same selection), and only then.
TEST(ComputedFor, ChangesWithTheSelectionOrTheTraceOnly) {
  LoadedTrace first, second;
  ComputedFor<analysis::StepRankFilter> heatmap_for;
  EXPECT_TRUE(heatmap_for.changes_to(first, {})) << "nothing computed yet";
  EXPECT_FALSE(heatmap_for.changes_to(first, {}));
  EXPECT_TRUE(heatmap_for.changes_to(first, {2, 3, -1})) << "a step range picked";
  EXPECT_FALSE(heatmap_for.changes_to(first, {2, 3, -1}));
  EXPECT_TRUE(heatmap_for.changes_to(first, {2, 3, 1})) << "a rank picked";
  EXPECT_TRUE(heatmap_for.changes_to(second, {2, 3, 1})) << "another trace, same selection";
  EXPECT_FALSE(heatmap_for.changes_to(second, {2, 3, 1}));
  EXPECT_TRUE(heatmap_for.changes_to(first, {2, 3, 1})) << "back to the first trace";

  // No selection: only the trace counts (the statistics' sort order).
  ComputedFor<> order_for;
  EXPECT_TRUE(order_for.changes_to(first));
  EXPECT_FALSE(order_for.changes_to(first));
  EXPECT_TRUE(order_for.changes_to(second));

  // A selection equal to a default one is still computed once: "nothing yet" is not -1.
  ComputedFor<int> process_for;
  EXPECT_TRUE(process_for.changes_to(first, 0));
  EXPECT_FALSE(process_for.changes_to(first, 0));
}

}  // namespace
}  // namespace moescope::viewer
