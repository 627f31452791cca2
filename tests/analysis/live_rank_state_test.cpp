// LiveRankState / LiveRunState (live_rank_state.h): traces that grow while they are read. The
// traces are the synthetic MoE job (moe_job_writer.h) written by the TraceWriter a step per
// chunk; the test appends their bytes to a growing copy piece by piece, as the recorder's
// writes arrive, sometimes stopping inside a chunk, and after every refresh compares the live
// state with a full load of the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "moe_job_writer.h"
#include "moescope/analysis/live_rank_state.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/trace_reader.h"
#include "synthetic_moe_trace.h"

namespace moescope {
namespace {

using analysis::LiveRankState;
using analysis::LiveRunState;

// A written trace and where its chunks end.
struct WrittenTrace {
  std::string path;
  std::vector<char> bytes;
  uint64_t chunks_begin = 0;
  std::vector<uint64_t> chunk_ends;
};

WrittenTrace written_trace(const std::string& path) {
  WrittenTrace trace;
  trace.path = path;
  std::ifstream in(path, std::ios::binary);
  trace.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  trace::TraceReader reader;
  EXPECT_TRUE(reader.open(path));
  trace.chunks_begin = reader.chunks_begin();
  trace::Chunk chunk;
  while (reader.next_chunk(chunk)) trace.chunk_ends.push_back(reader.position());
  EXPECT_TRUE(reader.errors().empty());
  return trace;
}

// A copy of `trace` that grows: grow_to(n) appends its bytes up to n.
struct GrowingCopy {
  const WrittenTrace* source = nullptr;
  std::string path;
  uint64_t size = 0;
  void grow_to(uint64_t end) {
    ASSERT_GE(end, size);
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write(source->bytes.data() + size, std::streamsize(end - size));
    size = end;
  }
};

testing::MoeJobConfig small_job(int ranks, int steps) {
  testing::MoeJobConfig config;
  config.ranks = ranks;
  config.steps = steps;
  config.layers = 2;
  config.experts = 8;
  config.expert_parallel = 2;
  config.kernels_per_layer = 2;
  config.slow_rank = ranks - 1;
  config.slow_from_step = steps / 2;
  config.slow_host = -1;
  config.hot_expert = 5;
  config.chunk_bytes = 1;  // a chunk per stream and step, as a recorder flushing every step
  config.strings_first = true;
  config.threads = 1;
  return config;
}

// The live state equals what a full load of the same files gives: per rank the steps finished
// and the last one's times; the latest step every rank finished and its expert-load samples.
void expect_same_as_full_load(const LiveRunState& run, const std::vector<std::string>& paths) {
  analysis::TraceModel full = analysis::load_traces(paths);
  analysis::TimeBreakdown breakdown = analysis::compute_time_breakdown(full);
  const std::vector<int32_t> ranks = run.ranks();
  ASSERT_EQ(run.files().size(), paths.size());
  int64_t common = -1;
  bool first = true;
  for (size_t i = 0; i < paths.size(); ++i) {
    const LiveRankState& file = *run.files()[i];
    const int index = full.process_of_rank(ranks[i]);
    ASSERT_GE(index, 0) << "rank " << ranks[i];
    const analysis::ProcessTrack& process = full.processes[size_t(index)];
    EXPECT_EQ(file.has_steps(), !process.steps.empty());
    if (process.steps.empty()) continue;
    std::vector<const analysis::StepBreakdown*> finished;
    for (const auto& step : breakdown.ranks[size_t(index)].steps) {
      if (step.step >= 0) finished.push_back(&step);
    }
    if (!finished.empty() && !process.complete) finished.pop_back();
    EXPECT_EQ(file.steps_finished(), finished.size()) << paths[i];
    if (finished.empty()) {
      EXPECT_EQ(file.last_step(), nullptr);
      common = -1;
      first = false;
      continue;
    }
    const analysis::LiveStep* last = file.last_step();
    ASSERT_NE(last, nullptr) << paths[i];
    EXPECT_EQ(last->step, finished.back()->step);
    EXPECT_NEAR(last->step_ms, finished.back()->step_ms, 1e-9);
    EXPECT_NEAR(last->busy_ms, finished.back()->busy_ms(), 1e-9);
    EXPECT_NEAR(last->exposed_communication_ms, finished.back()->exposed_communication_ms, 1e-9);
    if (first || common >= 0) common = first ? last->step : std::min(common, last->step);
    first = false;
  }
  EXPECT_EQ(run.common_step(), common);
  if (common < 0) return;
  size_t samples = 0;
  for (const analysis::ExpertLoadSample& sample : full.expert_loads) {
    if (sample.step != common) continue;
    ++samples;
    const int32_t rank = full.processes[sample.process].rank;
    const size_t i = size_t(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
    ASSERT_LT(i, ranks.size());
    const auto& loads = run.files()[i]->loads(common);
    auto found = std::find_if(loads.begin(), loads.end(), [&](const analysis::LiveExpertLoad& l) {
      return l.sample.layer == sample.layer && l.sample.scope == sample.scope;
    });
    ASSERT_NE(found, loads.end()) << "rank " << rank << " layer " << sample.layer << " common "
                                  << common << " last " << run.files()[i]->last_step()->step
                                  << " loads " << loads.size() << " window "
                                  << run.files()[i]->window_chunks();
    auto tokens = full.tokens(sample);
    EXPECT_EQ(found->tokens, std::vector<uint32_t>(tokens.begin(), tokens.end()));
  }
  size_t live_samples = 0;
  for (const auto& file : run.files()) live_samples += file->loads(common).size();
  EXPECT_EQ(live_samples, samples);
  EXPECT_GT(samples, 0u);
}

// Steps from step markers (numbered as recorded), or from the repeating "train_step" range
// (numbered by their order: the window, which starts later, keeps the file's numbers).
class GrowingTraces : public ::testing::TestWithParam<bool> {};

TEST_P(GrowingTraces, MatchAFullLoadAndReadOnlyWhatIsNew) {
  const bool markers = GetParam();
  const std::string directory =
      testing::test_directory(markers ? "live_rank_state_markers" : "live_rank_state_ranges");
  testing::MoeJobConfig config = small_job(2, 14);
  config.step_markers = markers;
  const auto sources = testing::write_moe_job(config, directory + "/written");
  ASSERT_EQ(sources.size(), 2u);
  std::vector<WrittenTrace> written;
  for (const auto& path : sources) written.push_back(written_trace(path));
  std::vector<GrowingCopy> copies;
  std::vector<std::string> paths;
  for (size_t r = 0; r < written.size(); ++r) {
    copies.push_back({&written[r], directory + "/live." + std::to_string(r) + ".moetrace", 0});
    paths.push_back(copies.back().path);
    std::filesystem::remove(paths.back());
  }
  LiveRunState run;
  // A header cut short: nothing readable yet, and no error.
  copies[0].grow_to(7);
  run.refresh({paths[0]}, 1);
  EXPECT_FALSE(run.files()[0]->readable());
  EXPECT_TRUE(run.files()[0]->errors().empty());
  for (auto& copy : copies) copy.grow_to(copy.source->chunks_begin);
  // A file that is not a trace is said to be one, once.
  const std::string not_a_trace = directory + "/notes.moetrace";
  std::ofstream(not_a_trace) << "not a moescope trace, only notes";
  LiveRankState notes(not_a_trace);
  EXPECT_FALSE(notes.refresh());
  EXPECT_FALSE(notes.refresh());
  ASSERT_EQ(notes.errors().size(), 1u);
  EXPECT_NE(notes.errors()[0].message.find("not a moescope trace"), std::string::npos);
  // Chunks per piece: rank 0 one at a time, rank 1 three at a time and then half a chunk more.
  std::vector<size_t> whole(copies.size(), 0);
  uint64_t max_window = 0;
  for (int piece = 0; piece < 40; ++piece) {
    std::vector<uint64_t> whole_before(copies.size());
    for (size_t r = 0; r < copies.size(); ++r) {
      const auto& ends = copies[r].source->chunk_ends;
      whole_before[r] = whole[r] ? ends[whole[r] - 1] : copies[r].source->chunks_begin;
      // The end chunk is left for last (a job still running has none).
      whole[r] = std::min(whole[r] + (r == 0 ? 1 : 3), ends.size() - 1);
      uint64_t end = ends[whole[r] - 1];
      if (r == 1 && whole[r] < ends.size() - 1) end += (ends[whole[r]] - end) / 2;
      copies[r].grow_to(end);
    }
    run.refresh(paths, 1);
    for (size_t r = 0; r < copies.size(); ++r) {
      const LiveRankState& file = *run.files()[r];
      EXPECT_TRUE(file.errors().empty()) << file.errors().front().to_string();
      // Only the whole chunks appended since the previous refresh were read.
      EXPECT_EQ(file.counters().last_refresh_bytes,
                copies[r].source->chunk_ends[whole[r] - 1] - whole_before[r])
          << "piece " << piece << " rank " << r;
      max_window = std::max<uint64_t>(max_window, file.window_chunks());
    }
    // With ranges, rank 0 (a chunk per piece) has no step before its second train_step span
    // (piece 3), while rank 1 runs on and lets its first steps go: the two agree again once
    // rank 0 finished a step rank 1 still keeps (piece 7). A full load guesses the range once
    // every rank has two (a model-wide choice), the live state per rank.
    if (markers || piece >= 7) expect_same_as_full_load(run, paths);
  }
  // Every byte but the end chunks' was read once, and the window stayed a few steps long.
  for (size_t r = 0; r < copies.size(); ++r) {
    const auto& ends = copies[r].source->chunk_ends;
    EXPECT_EQ(run.files()[r]->counters().bytes_read,
              ends[ends.size() - 2] - copies[r].source->chunks_begin);
    EXPECT_EQ(run.files()[r]->counters().restarts, 0u);
    EXPECT_FALSE(run.files()[r]->complete());
  }
  EXPECT_GE(run.files()[0]->counters().chunks_read, 28u);  // strings + 2 per step
  // A rank ahead of the others keeps the steps since the latest one every rank finished (rank 1
  // ran up to 3 chunks ahead per piece); once level, each keeps about two steps.
  EXPECT_LE(max_window, 2 * LiveRankState::kMaxKeptSteps + 4);
  for (const auto& file : run.files()) EXPECT_LE(file->window_chunks(), 6u);
  // The writers close their files: the last step counts too.
  for (auto& copy : copies) copy.grow_to(copy.source->bytes.size());
  run.refresh(paths, 1);
  for (const auto& file : run.files()) {
    EXPECT_TRUE(file->complete());
    EXPECT_EQ(file->steps_finished(), 14u);
    EXPECT_EQ(file->step_source(),
              markers ? analysis::StepSource::kMarkers : analysis::StepSource::kRepeatingRange);
  }
  expect_same_as_full_load(run, paths);
}

INSTANTIATE_TEST_SUITE_P(LiveRankState, GrowingTraces, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Markers" : "Ranges"; });

// A folder a job writes into again (trace names with %p, or fewer ranks than before) also holds
// an earlier run's files. The view follows the newest run from its first header on: the earlier
// run's ranks are left out, each with why, and do not hold the common step back.
TEST(LiveRunState, AnEarlierRunsFilesAreLeftOut) {
  const std::string directory = testing::test_directory("live_run_state_two_runs");
  testing::MoeJobConfig earlier_config = small_job(2, 4);
  earlier_config.start_unix_ns -= int64_t(3600) * 1'000'000'000;  // an hour before
  const auto earlier = testing::write_moe_job(earlier_config, directory + "/earlier");
  testing::MoeJobConfig bigger_config = small_job(4, 4);  // another world size
  bigger_config.start_unix_ns -= int64_t(7200) * 1'000'000'000;
  const auto bigger = testing::write_moe_job(bigger_config, directory + "/bigger");
  const auto sources = testing::write_moe_job(small_job(2, 10), directory + "/written");
  ASSERT_EQ(earlier.size(), 2u);
  ASSERT_EQ(bigger.size(), 4u);
  ASSERT_EQ(sources.size(), 2u);
  std::vector<WrittenTrace> written;
  for (const auto& path : sources) written.push_back(written_trace(path));
  std::vector<GrowingCopy> copies;
  std::vector<std::string> newest;
  for (size_t r = 0; r < written.size(); ++r) {
    copies.push_back({&written[r], directory + "/live." + std::to_string(r) + ".moetrace", 0});
    newest.push_back(copies.back().path);
    std::filesystem::remove(newest.back());
  }
  // As a folder lists them: the earlier runs' files first.
  std::vector<std::string> paths = {earlier[0], earlier[1], bigger[3], newest[0], newest[1]};
  LiveRunState run;
  // Only the earlier runs' files can be read yet: the larger world size is the other run.
  run.refresh(paths, 1);
  ASSERT_EQ(run.files().size(), 4u);
  ASSERT_EQ(run.other_runs().size(), 1u);
  EXPECT_EQ(run.other_runs()[0].file, bigger[3]);
  EXPECT_NE(run.other_runs()[0].message.find("(the world sizes differ)"), std::string::npos)
      << run.other_runs()[0].message;
  // The newest run's headers: its ranks are the run from now on, though no event is written.
  for (auto& copy : copies) copy.grow_to(copy.source->chunks_begin);
  run.refresh(paths, 1);
  ASSERT_EQ(run.files().size(), 2u);
  EXPECT_EQ(run.files()[0]->path(), newest[0]);
  EXPECT_EQ(run.files()[1]->path(), newest[1]);
  ASSERT_EQ(run.other_runs().size(), 3u);
  EXPECT_EQ(run.other_runs()[0].file, earlier[0]);
  EXPECT_NE(run.other_runs()[0].message.find("refused: rank 0 of 2 again (" + newest[0] +
                                             " is rank 0 too), recorded at another time"),
            std::string::npos)
      << run.other_runs()[0].message;
  EXPECT_EQ(run.other_runs()[2].file, bigger[3]);
  EXPECT_EQ(run.common_step(), -1);
  // Half the newest run, then all of it: the same as a full load of its files alone, and the
  // common step is its own (the earlier run finished at step 3).
  for (auto& copy : copies)
    copy.grow_to(copy.source->chunk_ends[copy.source->chunk_ends.size() / 2]);
  run.refresh(paths, 1);
  EXPECT_EQ(run.other_runs().size(), 3u);
  expect_same_as_full_load(run, newest);
  EXPECT_GT(run.common_step(), 3);
  for (auto& copy : copies) copy.grow_to(copy.source->bytes.size());
  run.refresh(paths, 1);
  expect_same_as_full_load(run, newest);
  EXPECT_EQ(run.common_step(), 9);
  EXPECT_EQ(run.ranks(), (std::vector<int32_t>{0, 1}));
}

TEST(LiveRankState, APartialLastChunkIsRetriedAndAReplacedFileIsReadAgain) {
  const std::string directory = testing::test_directory("live_rank_state_replaced");
  const auto long_run = testing::write_moe_job(small_job(1, 12), directory + "/long");
  testing::MoeJobConfig other = small_job(1, 6);
  other.run_id = "another-run";  // another header
  const auto short_run = testing::write_moe_job(other, directory + "/short");
  ASSERT_EQ(long_run.size(), 1u);
  ASSERT_EQ(short_run.size(), 1u);
  const WrittenTrace first = written_trace(long_run[0]);
  const WrittenTrace second = written_trace(short_run[0]);
  GrowingCopy copy{&first, directory + "/live.moetrace", 0};
  std::filesystem::remove(copy.path);
  const auto& ends = first.chunk_ends;
  // Everything but the end chunk, then a chunk header and a few bytes of the next payload.
  copy.grow_to(ends[ends.size() - 2]);
  LiveRankState file(copy.path);
  EXPECT_TRUE(file.refresh());
  EXPECT_EQ(file.steps_finished(), 11u);
  const uint64_t before = file.counters().bytes_read;
  copy.grow_to(ends[ends.size() - 2] + 30);
  EXPECT_FALSE(file.refresh());
  EXPECT_TRUE(file.errors().empty());
  EXPECT_EQ(file.counters().last_refresh_bytes, 0u);
  copy.grow_to(first.bytes.size());
  EXPECT_TRUE(file.refresh());
  EXPECT_EQ(file.counters().last_refresh_bytes, ends.back() - ends[ends.size() - 2]);
  EXPECT_EQ(file.counters().bytes_read, before + ends.back() - ends[ends.size() - 2]);
  EXPECT_TRUE(file.complete());
  EXPECT_EQ(file.steps_finished(), 12u);
  // Replaced by a shorter trace of another run: read again from the start.
  std::filesystem::remove(copy.path);
  GrowingCopy replaced{&second, copy.path, 0};
  replaced.grow_to(second.chunk_ends[8]);
  EXPECT_TRUE(file.refresh());
  EXPECT_EQ(file.counters().restarts, 1u);
  EXPECT_FALSE(file.complete());
  EXPECT_EQ(file.counters().last_refresh_bytes, second.chunk_ends[8] - second.chunks_begin);
  LiveRunState run;
  run.refresh({copy.path}, 1);
  expect_same_as_full_load(run, {copy.path});
  ASSERT_NE(file.last_step(), nullptr);
  EXPECT_EQ(file.last_step()->step, run.files()[0]->last_step()->step);
  // Truncated in place to a shorter length: read again too.
  std::filesystem::resize_file(copy.path, second.chunk_ends[4]);
  EXPECT_TRUE(file.refresh());
  EXPECT_EQ(file.counters().restarts, 2u);
  EXPECT_EQ(file.steps_finished(), run.files()[0]->steps_finished() - 2);
}

TEST(LiveRankState, ADamagedLengthBeforeOtherChunksIsDamageNotAPartialChunk) {
  const std::string directory = testing::test_directory("live_rank_state_damaged");
  const auto job = testing::write_moe_job(small_job(1, 8), directory);
  ASSERT_EQ(job.size(), 1u);
  const WrittenTrace written = written_trace(job[0]);
  // Chunk 5's payload length now runs past the end of the file; chunks follow it.
  std::vector<char> bytes = written.bytes;
  const uint64_t chunk = written.chunk_ends[4];
  const uint32_t length = uint32_t(bytes.size());
  std::memcpy(bytes.data() + chunk + 12, &length, sizeof(length));
  const std::string path = directory + "/damaged.moetrace";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  LiveRankState file(path);
  EXPECT_TRUE(file.refresh());
  ASSERT_FALSE(file.errors().empty());
  EXPECT_EQ(file.errors().front().offset, chunk) << file.errors().front().to_string();
  // Every other chunk was read, the end chunk included.
  EXPECT_TRUE(file.complete());
  EXPECT_EQ(file.counters().bytes_read, bytes.size() - written.chunks_begin);
  LiveRunState run;
  run.refresh({path}, 1);
  expect_same_as_full_load(run, {path});
}

}  // namespace
}  // namespace moescope
