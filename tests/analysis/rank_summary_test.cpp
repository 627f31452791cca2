// Rank summaries (rank_summary.h, summary_load.h): the report from summaries equals the report
// from the full traces, number for number (1e-9 relative), on a synthetic job with planted
// problems, on the recorded 2-rank run of tests/data and on real Kineto traces; damaged,
// missing and stale summaries fall back to their trace with a note; summaries of different
// runs are refused; the decoder survives damage anywhere.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "moe_job_writer.h"
#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/summary_load.h"
#include "moescope/analysis/trace_loader.h"

namespace {

using namespace moescope::analysis;
namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("rank_summary_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Every number of `a` equals that of `b` within `relative`; everything else exactly.
void expect_same(const json& a, const json& b, const std::string& where, double relative,
                 int& differences) {
  if (differences > 20) return;
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    const double scale = std::max({std::fabs(x), std::fabs(y), 1e-300});
    if (!(x == y || std::fabs(x - y) <= relative * scale)) {
      ADD_FAILURE() << where << ": " << x << " (traces) vs " << y << " (summaries)";
      ++differences;
    }
    return;
  }
  if (a.type() != b.type()) {
    ADD_FAILURE() << where << ": " << a.type_name() << " vs " << b.type_name();
    ++differences;
    return;
  }
  if (a.is_object()) {
    std::vector<std::string> keys_a, keys_b;
    for (const auto& [key, value] : a.items()) keys_a.push_back(key);
    for (const auto& [key, value] : b.items()) keys_b.push_back(key);
    if (keys_a != keys_b) {
      ADD_FAILURE() << where << ": different keys";
      ++differences;
      return;
    }
    for (const auto& key : keys_a)
      expect_same(a[key], b[key], where + "." + key, relative, differences);
  } else if (a.is_array()) {
    if (a.size() != b.size()) {
      ADD_FAILURE() << where << ": " << a.size() << " vs " << b.size() << " items";
      ++differences;
      return;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      expect_same(a[i], b[i], where + "[" + std::to_string(i) + "]", relative, differences);
    }
  } else if (a != b) {
    ADD_FAILURE() << where << ": " << a.dump() << " vs " << b.dump();
    ++differences;
  }
}

json full_report(const std::vector<std::string>& paths) {
  TraceModel model = load_traces(paths);
  return json::parse(render_report(model, build_report(model), ReportFormat::kJson));
}

json summary_report(const std::vector<std::string>& paths, SummaryLoad* out = nullptr) {
  SummaryLoad loaded = load_rank_summaries(paths);
  EXPECT_TRUE(loaded.refused.empty()) << loaded.refused;
  EXPECT_FALSE(loaded.needs_traces);
  json report = json::parse(
      render_report(loaded.model, build_report(loaded.model, loaded.facts), ReportFormat::kJson));
  if (out) *out = std::move(loaded);
  return report;
}

// Writes each trace's summary beside it, as `moescope summarize` does.
void summarize_all(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    TraceModel model = load_traces({path});
    ASSERT_EQ(model.processes.size(), 1u) << path;
    std::string error;
    ASSERT_TRUE(write_rank_summary(summary_path_for(path),
                                   summarize_process(model, 0, fs::file_size(path)), error))
        << error;
  }
}

std::vector<std::string> write_job(const fs::path& dir,
                                   moescope::testing::MoeJobConfig config = {}) {
  config.ranks = 32;
  config.steps = 40;
  config.kernels_per_layer = 4;
  config.ranks_per_host = 4;
  config.expert_parallel = 8;
  config.slow_rank = 21;
  config.slow_from_step = 25;
  config.slow_host = 2;  // ranks 8-11
  std::vector<std::string> paths = moescope::testing::write_moe_job(config, dir.string());
  EXPECT_EQ(paths.size(), 32u);
  return paths;
}

TEST(RankSummary, ReportFromSummariesEqualsTheFullTracesOnASyntheticJob) {
  const fs::path dir = fresh_dir("job");
  const std::vector<std::string> paths = write_job(dir);
  summarize_all(paths);
  const json traces = full_report(paths);
  SummaryLoad loaded;
  const json summaries = summary_report(paths, &loaded);
  EXPECT_TRUE(loaded.notes.empty());
  EXPECT_TRUE(loaded.model.processes[0].threads.empty()) << "the summary path holds no spans";
  int differences = 0;
  expect_same(traces, summaries, "report", 1e-9, differences);

  // The planted problems, named: the rank and its onset, the host, the hot expert.
  bool onset = false, host = false, expert = false;
  for (const json& finding : summaries["findings"]) {
    const std::string kind = finding["kind"];
    if (kind == "slowdown_onset" && finding["where"]["ranks"] == json::array({21})) {
      onset = true;
      EXPECT_EQ(finding["where"]["first_step"], 25);
      EXPECT_NEAR(finding["metrics"]["slowdown"].get<double>(), 0.18, 0.03);
      EXPECT_NE(finding["evidence"].get<std::string>().find("rank 21 slower by 1"),
                std::string::npos);
    }
    if (kind == "slow_host") {
      host = finding["evidence"].get<std::string>().find("node-002") != std::string::npos;
      EXPECT_EQ(finding["where"]["ranks"], json::array({8, 9, 10, 11}));
    }
    if (kind == "expert_imbalance" && finding["where"]["layer"] == 1) {
      expert = finding["where"]["experts"] == json::array({17});
    }
  }
  EXPECT_TRUE(onset) << "no slowdown_onset for rank 21 from step 25";
  EXPECT_TRUE(host) << "no slow_host naming node-002";
  EXPECT_TRUE(expert) << "no expert_imbalance naming layer 1 expert 17";
  // The straggler map: rank 21 is waited for after its onset, rank 0 is not.
  const json& cross = summaries["cross_rank"];
  ASSERT_EQ(cross["ranks"].size(), 32u);
  const json& waited = cross["waited_for_ms"];
  double waited_21 = 0, waited_0 = 0;
  for (size_t s = 30; s < cross["steps"].size(); ++s) {
    waited_21 += waited[21][s].get<double>();
    waited_0 += waited[0][s].get<double>();
  }
  EXPECT_GT(waited_21, 10 * std::max(waited_0, 1e-6));
  fs::remove_all(dir);
}

TEST(RankSummary, ReportFromSummariesEqualsTheFullTracesOnRecordedAndKinetoTraces) {
  std::vector<std::vector<fs::path>> cases = {
      {fs::path(MOESCOPE_ANALYSIS_TEST_DIR) / "../data/moe_train_2ranks/run.0.moetrace",
       fs::path(MOESCOPE_ANALYSIS_TEST_DIR) / "../data/moe_train_2ranks/run.1.moetrace"}};
  const char* shared = std::getenv("MOESCOPE_SHARED_DATA");
  const fs::path kineto =
      (shared && *shared ? fs::path(shared) : fs::path(MOESCOPE_SHARED_DATA_DIR)) / "kineto";
  if (fs::exists(kineto / "gpu2_rank-0.json.gz")) {
    cases.push_back({kineto / "gpu2_rank-0.json.gz", kineto / "gpu2_rank-1.json.gz"});
    cases.push_back({kineto / "gpu1_nccl.json.gz"});
  } else {
    std::printf("Kineto cases skipped: no %s (set MOESCOPE_SHARED_DATA)\n", kineto.c_str());
  }
  int index = 0;
  for (const auto& files : cases) {
    const fs::path dir = fresh_dir("case" + std::to_string(index++));
    std::vector<std::string> paths;
    for (const fs::path& file : files) {
      ASSERT_TRUE(fs::exists(file)) << file;
      paths.push_back((dir / file.filename()).string());
      fs::copy_file(file, paths.back());
    }
    summarize_all(paths);
    const json traces = full_report(paths);
    const json summaries = summary_report(paths);
    int differences = 0;
    expect_same(traces, summaries, files.front().filename().string(), 1e-9, differences);
    fs::remove_all(dir);
  }
}

TEST(RankSummary, MissingDamagedOrStaleSummariesFallBackToTheirTraceWithANote) {
  const fs::path dir = fresh_dir("fallback");
  const std::vector<std::string> paths = write_job(dir);
  summarize_all(paths);
  fs::remove(summary_path_for(paths[3]));
  {
    std::fstream damaged(summary_path_for(paths[5]),
                         std::ios::in | std::ios::out | std::ios::binary);
    damaged.seekp(200);
    damaged.put('\x7f');
  }
  RankSummary stale;
  std::string error;
  ASSERT_TRUE(read_rank_summary(summary_path_for(paths[7]), stale, error)) << error;
  stale.trace_bytes += 1;
  ASSERT_TRUE(write_rank_summary(summary_path_for(paths[7]), stale, error)) << error;

  SummaryLoad loaded;
  const json summaries = summary_report(paths, &loaded);
  ASSERT_EQ(loaded.notes.size(), 3u);
  EXPECT_NE(loaded.notes[0].find("no summary"), std::string::npos) << loaded.notes[0];
  EXPECT_NE(loaded.notes[1].find("checksum"), std::string::npos) << loaded.notes[1];
  EXPECT_NE(loaded.notes[2].find("stale"), std::string::npos) << loaded.notes[2];
  int differences = 0;
  expect_same(full_report(paths), summaries, "report", 1e-9, differences);
  fs::remove_all(dir);
}

TEST(RankSummary, SummariesOfDifferentRunsAreRefused) {
  const fs::path dir = fresh_dir("runs");
  moescope::testing::MoeJobConfig config;
  const std::vector<std::string> paths = write_job(dir, config);
  summarize_all(paths);
  RankSummary other;
  std::string error;
  ASSERT_TRUE(read_rank_summary(summary_path_for(paths[9]), other, error)) << error;
  other.run_id = "another-run";
  ASSERT_TRUE(write_rank_summary(summary_path_for(paths[9]), other, error)) << error;
  const SummaryLoad loaded = load_rank_summaries(paths);
  EXPECT_NE(loaded.refused.find("different runs"), std::string::npos) << loaded.refused;
  EXPECT_NE(loaded.refused.find("another-run"), std::string::npos) << loaded.refused;
  EXPECT_NE(loaded.refused.find("job.9.moesummary"), std::string::npos) << loaded.refused;
  fs::remove_all(dir);
}

// A rank of another run read from its trace (no summary), e.g. a program's Kineto trace given
// with its .moetrace: not refused; the inputs go to the full-trace path, with a note.
TEST(RankSummary, ATraceOfAnotherRunWithoutSummaryGoesToTheTraces) {
  const fs::path dir = fresh_dir("mixed_runs");
  const std::vector<std::string> paths = write_job(dir);
  summarize_all(paths);
  moescope::testing::MoeJobConfig other_config;
  other_config.run_id = "another-run";
  const std::vector<std::string> other = write_job(dir / "other", other_config);
  std::vector<std::string> mixed(paths.begin(), paths.begin() + 4);
  mixed.push_back(other[5]);
  const SummaryLoad loaded = load_rank_summaries(mixed);
  EXPECT_EQ(loaded.refused, "");
  EXPECT_TRUE(loaded.needs_traces);
  ASSERT_FALSE(loaded.notes.empty());
  EXPECT_NE(loaded.notes.back().find("ranks of different runs"), std::string::npos)
      << loaded.notes.back();
  EXPECT_NE(loaded.notes.back().find("another-run"), std::string::npos) << loaded.notes.back();
  fs::remove_all(dir);
}

// Ranks whose traces end inside a collective (a job stopped while it hung) count it in their
// summary, which keeps it through a round trip; report then reads the traces, where the
// collective_open records name the hang, with a note.
TEST(RankSummary, ARankThatEndsInsideACollectiveGoesToTheTraces) {
  const fs::path dir = fresh_dir("hung");
  moescope::testing::MoeJobConfig config;
  config.hang_missing_rank = 6;
  const std::vector<std::string> paths = write_job(dir, config);
  summarize_all(paths);
  RankSummary waiting, missing;
  std::string error;
  ASSERT_TRUE(read_rank_summary(summary_path_for(paths[5]), waiting, error)) << error;
  ASSERT_TRUE(read_rank_summary(summary_path_for(paths[6]), missing, error)) << error;
  EXPECT_EQ(waiting.collectives_open_at_end, 1u);
  EXPECT_EQ(missing.collectives_open_at_end, 0u);
  const SummaryLoad loaded = load_rank_summaries(paths);
  EXPECT_EQ(loaded.refused, "");
  EXPECT_TRUE(loaded.needs_traces);
  ASSERT_FALSE(loaded.notes.empty());
  EXPECT_NE(loaded.notes.back().find("job.0.moetrace ends inside a collective (a hang)"),
            std::string::npos)
      << loaded.notes.back();
  fs::remove_all(dir);
}

// The header's checksum and sizes, recomputed around a plain `payload` (flags 0): the section
// decoder sees it.
std::string with_header(const std::string& valid, const std::string& payload) {
  std::string out = valid.substr(0, 16);
  uint64_t size = payload.size(), hash = 0xcbf29ce484222325ull;
  for (unsigned char c : payload) hash = (hash ^ c) * 0x100000001b3ull;
  out.append(reinterpret_cast<const char*>(&size), 8);
  out.append(reinterpret_cast<const char*>(&hash), 8);
  return out + payload;
}

TEST(RankSummary, DecoderRefusesDamageAnywhereWithAMessage) {
  const fs::path dir = fresh_dir("decode");
  const std::vector<std::string> paths = write_job(dir);
  TraceModel model = load_traces({paths[0]});
  const RankSummary original = summarize_process(model, 0, 1);
  const std::string packed = encode_rank_summary(original);
  const std::string valid = encode_rank_summary(original, /*compress=*/false);
  EXPECT_LT(packed.size() * 3, valid.size()) << "zstd keeps summaries small";
  RankSummary decoded;
  std::string error;
  ASSERT_TRUE(decode_rank_summary(packed, decoded, error)) << error;
  EXPECT_EQ(encode_rank_summary(decoded, false), valid) << "a round trip changes nothing";
  ASSERT_TRUE(decode_rank_summary(valid, decoded, error)) << error;
  EXPECT_EQ(encode_rank_summary(decoded, false), valid);
  const std::string payload = valid.substr(32);
  int refused = 0;
  for (size_t cut = 0; cut < valid.size(); cut += 1 + valid.size() / 300) {
    EXPECT_FALSE(decode_rank_summary(valid.substr(0, cut), decoded, error));
    EXPECT_FALSE(error.empty());
    // A byte set to 0xff past the header, checksum fixed: counts and times become huge.
    if (cut >= 32) {
      std::string damaged = payload;
      damaged[cut - 32] = '\xff';
      damaged[std::min(damaged.size() - 1, cut - 32 + 7)] = '\x7f';
      refused += !decode_rank_summary(with_header(valid, damaged), decoded, error);
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_FALSE(decode_rank_summary("not a summary at all, just text", decoded, error));
  EXPECT_NE(error.find("not a moescope rank summary"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
