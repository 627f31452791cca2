// The job overview's model on a generated 64-rank job read from its summaries: the planted
// slow rank (with its onset) and slow host are named, rows are grouped by host and ordered as
// asked, the heat of the slow rank rises after its onset, and a click loads exactly that rank's
// window of steps, from its trace, within the detail's bounds.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "moescope/viewer/job_overview.h"
#include "moescope/viewer/rank_detail.h"
#include "overview_job.h"

namespace moescope::viewer {
namespace {

namespace fs = std::filesystem;

class JobOverviewTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ =
        (fs::temp_directory_path() / ("moescope_overview_" + std::to_string(getpid()))).string();
    fs::remove_all(directory_);
    fs::create_directories(directory_ + "/job");
    config_ = moescope::testing::overview_job_config();
    summaries_ = moescope::testing::write_summarized_job(config_, directory_ + "/job");
    ASSERT_EQ(summaries_.size(), size_t(config_.ranks));
    overview_ = load_job_overview(summaries_);
  }
  static void TearDownTestSuite() { fs::remove_all(directory_); }

  static size_t column_of(int64_t step) {
    auto at = std::find(overview_.steps.begin(), overview_.steps.end(), step);
    EXPECT_NE(at, overview_.steps.end()) << "step " << step;
    return size_t(at - overview_.steps.begin());
  }

  static inline std::string directory_;
  static inline moescope::testing::MoeJobConfig config_;
  static inline std::vector<std::string> summaries_;
  static inline JobOverview overview_;
};

TEST_F(JobOverviewTest, NamesThePlantedRankWithItsOnsetAndTheSlowHost) {
  ASSERT_TRUE(overview_.error.empty()) << overview_.error;
  ASSERT_EQ(overview_.rows.size(), 64u);
  EXPECT_EQ(overview_.steps.size(), size_t(config_.steps));
  const int slow = overview_.row_of_rank(config_.slow_rank);
  ASSERT_GE(slow, 0);
  // Onset within 2% of the steps of the planted one.
  EXPECT_NEAR(double(overview_.rows[slow].onset_step), config_.slow_from_step, 1.0);
  EXPECT_NEAR(overview_.rows[slow].slowdown, config_.slow_factor - 1, 0.05);
  for (const OverviewRow& row : overview_.rows) {
    if (row.rank != config_.slow_rank) {
      EXPECT_LT(row.onset_step, 0) << "rank " << row.rank;
    }
  }
  const std::string host = moescope::testing::moe_job_host_name(config_.slow_host);
  bool named_rank = false, named_host = false;
  for (const std::string& line : overview_.headlines) {
    named_rank = named_rank || line.find("rank 37 slower by") != std::string::npos;
    named_host = named_host || line.find("host " + host) != std::string::npos;
  }
  EXPECT_TRUE(named_rank);
  EXPECT_TRUE(named_host);
  EXPECT_EQ(overview_.rows[slow].host, moescope::testing::moe_job_host_name(37 / 8));
  EXPECT_FALSE(overview_.rows[slow].trace.empty());
}

TEST_F(JobOverviewTest, RowsAreGroupedByHostAndOrderedAsAsked) {
  const std::string slow_host = moescope::testing::moe_job_host_name(config_.slow_host);
  const std::string slow_rank_host = moescope::testing::moe_job_host_name(config_.slow_rank / 8);
  for (OverviewOrder order :
       {OverviewOrder::kRank, OverviewOrder::kSlowestMean, OverviewOrder::kOnset}) {
    RowOrder rows = order_overview_rows(overview_, order);
    ASSERT_EQ(rows.rows.size(), 64u);
    ASSERT_EQ(rows.groups.size(), 8u);
    for (const HostGroup& group : rows.groups) {
      EXPECT_EQ(group.count, 8u);
      for (size_t i = group.first; i < group.first + group.count; ++i) {
        EXPECT_EQ(overview_.rows[rows.rows[i]].host, group.host);
      }
    }
  }
  RowOrder by_rank = order_overview_rows(overview_, OverviewOrder::kRank);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(overview_.rows[by_rank.rows[i]].rank, int(i));

  // Slowest mean: the slow host's ranks (10% slower throughout) first, then the host of the
  // rank that is 18% slower for the last 15 of 40 steps, that rank on top of it.
  RowOrder by_mean = order_overview_rows(overview_, OverviewOrder::kSlowestMean);
  EXPECT_EQ(by_mean.groups[0].host, slow_host);
  EXPECT_EQ(by_mean.groups[1].host, slow_rank_host);
  EXPECT_EQ(overview_.rows[by_mean.rows[by_mean.groups[1].first]].rank, config_.slow_rank);
  for (size_t i = 1; i < 8; ++i) {
    EXPECT_GE(overview_.rows[by_mean.rows[i - 1]].mean_busy_ms,
              overview_.rows[by_mean.rows[i]].mean_busy_ms);
  }

  RowOrder by_onset = order_overview_rows(overview_, OverviewOrder::kOnset);
  EXPECT_EQ(overview_.rows[by_onset.rows[0]].rank, config_.slow_rank);
  EXPECT_EQ(by_onset.groups[0].host, slow_rank_host);
}

TEST_F(JobOverviewTest, SlowRankIsHotterAfterItsOnset) {
  const size_t slow = size_t(overview_.row_of_rank(config_.slow_rank));
  const size_t before = column_of(config_.slow_from_step - 5);
  const size_t after = column_of(config_.slow_from_step + 5);
  for (OverviewMetric metric : {OverviewMetric::kBusy, OverviewMetric::kWaitedFor}) {
    EXPECT_GT(overview_.heat(metric, slow, after), overview_.heat(metric, slow, before) + 0.3);
  }
  EXPECT_NEAR(overview_.heat(OverviewMetric::kBusy, slow, after), 1.0, 0.15);
  // An ordinary rank stays cool.
  const size_t ordinary = size_t(overview_.row_of_rank(1));
  EXPECT_LT(overview_.heat(OverviewMetric::kBusy, ordinary, after), 0.5);
}

TEST_F(JobOverviewTest, ClickLoadsExactlyThatRanksWindow) {
  const int row = overview_.row_of_rank(config_.slow_rank);
  DetailRequest request = detail_request_for(overview_, size_t(row), column_of(12));
  ASSERT_TRUE(request.error.empty()) << request.error;
  EXPECT_EQ(request.rank, config_.slow_rank);
  EXPECT_EQ(fs::path(request.trace).filename(), "job.37.moetrace");
  EXPECT_EQ(request.step, 12);
  EXPECT_EQ(request.first_step, 12 - kDetailStepsAround);
  EXPECT_EQ(request.last_step, 12 + kDetailStepsAround);
  EXPECT_LT(request.max_events, overview_.rows[row].events);  // not the whole trace

  std::unique_ptr<LoadedTrace> detail = load_rank_detail(request);
  ASSERT_EQ(detail->model.processes.size(), 1u);
  EXPECT_EQ(detail->model.processes[0].rank, config_.slow_rank);
  for (int64_t step = request.first_step; step <= request.last_step; ++step) {
    EXPECT_TRUE(std::binary_search(detail->steps.begin(), detail->steps.end(), step)) << step;
  }
  // The reader stopped after the window: the last steps of the run were not read.
  EXPECT_TRUE(detail->model.processes[0].truncated);
  EXPECT_LT(detail->steps.back(), config_.steps - 1);
  EXPECT_LE(detail->model.total_events, kDetailMaxEvents);
  double begin = 0, end = 0;
  ASSERT_TRUE(detail_window_range(*detail, request, begin, end));
  EXPECT_LT(begin, end);

  // The first step's window is clipped at the run's start.
  DetailRequest first = detail_request_for(overview_, 0, 0);
  EXPECT_EQ(first.first_step, overview_.steps.front());
  EXPECT_EQ(first.last_step, overview_.steps.front() + kDetailStepsAround);
  EXPECT_FALSE(detail_request_for(overview_, 64, 0).error.empty());
}

#if defined(__SANITIZE_ADDRESS__)
#define MOESCOPE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOESCOPE_TEST_SANITIZED 1
#endif
#endif
#ifndef MOESCOPE_TEST_SANITIZED
#define MOESCOPE_TEST_SANITIZED 0
#endif

#if !MOESCOPE_TEST_SANITIZED
// While it lives, no file can be opened (the soft RLIMIT_NOFILE at the lowest free
// descriptor): a folder that cannot be listed even by root, as the tests run in CI.
class NoFreeDescriptor {
 public:
  NoFreeDescriptor() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    const int lowest = dup(0);
    close(lowest);
    rlimit none = saved_;
    none.rlim_cur = rlim_t(lowest);
    setrlimit(RLIMIT_NOFILE, &none);
  }
  ~NoFreeDescriptor() { setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};
#endif

TEST_F(JobOverviewTest, FoldersExpandToTheirSummariesElseTheirTracesAndBadInputSaysWhatIsWrong) {
  ViewerInputs inputs = expand_viewer_inputs({directory_ + "/job"});
  ASSERT_TRUE(inputs.error.empty()) << inputs.error;
  ASSERT_EQ(inputs.summaries.size(), 64u);
  EXPECT_TRUE(inputs.traces.empty());
  EXPECT_TRUE(std::is_sorted(inputs.summaries.begin(), inputs.summaries.end()));
  // Traces alone are not an overview: they open in the timeline.
  inputs = expand_viewer_inputs({directory_ + "/job/job.0.moetrace"});
  EXPECT_TRUE(inputs.summaries.empty());
  EXPECT_EQ(inputs.traces, std::vector<std::string>{directory_ + "/job/job.0.moetrace"});
  // A trace given with summaries joins the overview (summarised on the fly).
  inputs = expand_viewer_inputs({summaries_[1], directory_ + "/job/job.0.moetrace"});
  EXPECT_EQ(inputs.summaries.size(), 2u);
  EXPECT_TRUE(inputs.traces.empty());
  // A folder of traces without summaries stands for its traces, sorted.
  fs::create_directories(directory_ + "/traces");
  for (int rank : {3, 1, 2}) {
    const std::string name = "/job." + std::to_string(rank) + ".moetrace";
    fs::copy_file(directory_ + "/job" + name, directory_ + "/traces" + name);
  }
  inputs = expand_viewer_inputs({directory_ + "/traces"});
  ASSERT_TRUE(inputs.error.empty()) << inputs.error;
  EXPECT_TRUE(inputs.summaries.empty());
  EXPECT_EQ(inputs.traces, (std::vector<std::string>{directory_ + "/traces/job.1.moetrace",
                                                     directory_ + "/traces/job.2.moetrace",
                                                     directory_ + "/traces/job.3.moetrace"}));
  // The PyTorch profiler's folder (tensorboard_trace_handler) stands for its JSON traces.
  fs::create_directories(directory_ + "/profiler");
  for (const char* name : {"worker1.200.pt.trace.json.gz", "worker0.100.pt.trace.json"}) {
    std::ofstream(directory_ + "/profiler/" + name) << "{}";
  }
  std::ofstream(directory_ + "/profiler/notes.txt") << "not a trace";
  inputs = expand_viewer_inputs({directory_ + "/profiler"});
  ASSERT_TRUE(inputs.error.empty()) << inputs.error;
  EXPECT_EQ(inputs.traces,
            (std::vector<std::string>{directory_ + "/profiler/worker0.100.pt.trace.json",
                                      directory_ + "/profiler/worker1.200.pt.trace.json.gz"}));
  // Nothing to open: an empty folder, and a moescope run folder whose JSON is its metadata.
  fs::create_directories(directory_ + "/empty");
  inputs = expand_viewer_inputs({directory_ + "/empty"});
  EXPECT_NE(inputs.error.find(directory_ + "/empty holds no .moesummary, .moetrace or PyTorch"),
            std::string::npos)
      << inputs.error;
  fs::create_directories(directory_ + "/run");
  std::ofstream(directory_ + "/run/run.json") << "{}";
  inputs = expand_viewer_inputs({directory_ + "/traces", directory_ + "/run"});
  EXPECT_NE(inputs.error.find(directory_ + "/run holds no"), std::string::npos) << inputs.error;

  // A folder that cannot be listed says so, not that it holds nothing. Not under the
  // sanitizers: with no descriptor free, their own checks fail (UBSan's vptr check reads memory
  // through a pipe) and report the exception's vtable as invalid.
#if !MOESCOPE_TEST_SANITIZED
  {
    NoFreeDescriptor no_descriptor;
    inputs = expand_viewer_inputs({directory_ + "/traces"});
  }
  EXPECT_EQ(inputs.error, directory_ + "/traces: cannot list: Too many open files");
#endif

  // A summary alone (no trace beside it) shows, but has no detail to load.
  fs::create_directories(directory_ + "/alone");
  fs::copy_file(summaries_[3], directory_ + "/alone/job.3.moesummary");
  JobOverview alone = load_job_overview({directory_ + "/alone/job.3.moesummary"});
  ASSERT_TRUE(alone.error.empty()) << alone.error;
  ASSERT_EQ(alone.rows.size(), 1u);
  EXPECT_NE(detail_request_for(alone, 0, 0).error.find("no trace"), std::string::npos);

  // Damage: a clear error naming the file, no crash.
  const std::string damaged = directory_ + "/alone/job.4.moesummary";
  std::ofstream(damaged) << "not a summary";
  JobOverview broken = load_job_overview({damaged});
  EXPECT_NE(broken.error.find("job.4.moesummary"), std::string::npos) << broken.error;
}

}  // namespace
}  // namespace moescope::viewer
