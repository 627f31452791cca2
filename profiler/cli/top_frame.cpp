// `moescope top`'s frame (top_frame.h).
#include "top_frame.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/statistics.h"
#include "process_liveness.h"

namespace moescope::cli {
namespace {

using analysis::LiveRankState;
using analysis::LiveStep;
using analysis::TimeNs;

std::string format(const char* pattern, auto... values) {
  char line[512];
  std::snprintf(line, sizeof(line), pattern, values...);
  return line;
}

// A rank of the job: a file with steps, its rank number, and whether its process is gone with
// the file still open (killed: process_liveness.h).
struct RankRow {
  int32_t rank = 0;
  const LiveRankState* file = nullptr;
  bool gone = false;
  bool writing() const { return !file->complete() && !gone; }
  const char* ended() const {
    return file->complete() ? " (its process ended)" : gone ? " (its process is gone)" : "";
  }
};

std::string rank_line(const RankRow& row) {
  const LiveStep* last = row.file->last_step();
  if (!last) return format("%-5d %6d %9s %9s %9s %12s\n", row.rank, 0, "-", "-", "-", "-");
  return format("%-5d %6llu %9lld %9.1f %9.1f %9.1f ms\n", row.rank,
                static_cast<unsigned long long>(row.file->steps_finished()),
                static_cast<long long>(last->step), last->step_ms, last->busy_ms,
                last->exposed_communication_ms);
}

// "what  min X  p50 X  p90 X  max X" with `digits` decimals.
std::string distribution(const char* what, std::vector<double> values, int digits = 1) {
  std::sort(values.begin(), values.end());
  return format("%-12s min %9.*f  p50 %9.*f  p90 %9.*f  max %9.*f\n", what, digits, values.front(),
                digits, analysis::percentile_of_sorted(values, 0.5), digits,
                analysis::percentile_of_sorted(values, 0.9), digits, values.back());
}

// Every rank on its line, or at many ranks the slowest and fastest few (by busy time of their
// last finished step) and the distribution over all of them.
std::string rank_rows(const std::vector<RankRow>& rows) {
  std::string text = format("%-5s %6s %9s %9s %9s %12s\n", "rank", "steps", "last", "step ms",
                            "busy ms", "exposed comm");
  if (rows.size() <= kTopRankRows) {
    for (const RankRow& row : rows) text += rank_line(row);
    return text;
  }
  std::vector<RankRow> finished, waiting;
  for (const RankRow& row : rows) (row.file->last_step() ? finished : waiting).push_back(row);
  std::stable_sort(finished.begin(), finished.end(), [](const RankRow& a, const RankRow& b) {
    return a.file->last_step()->busy_ms > b.file->last_step()->busy_ms;
  });
  const size_t slowest = std::min<size_t>(5, finished.size());
  const size_t fastest = std::min<size_t>(3, finished.size() - slowest);
  for (size_t i = 0; i < slowest; ++i) text += rank_line(finished[i]);
  if (finished.size() > slowest + fastest) {
    text += format("  ... %zu ranks between ...\n", finished.size() - slowest - fastest);
  }
  for (size_t i = finished.size() - fastest; i < finished.size(); ++i) {
    text += rank_line(finished[i]);
  }
  if (!waiting.empty()) {
    text += format("%zu rank(s) without a finished step, first rank %d\n", waiting.size(),
                   waiting.front().rank);
  }
  if (finished.empty()) return text;
  std::vector<double> step_ms, busy_ms, exposed_ms, steps;
  for (const RankRow& row : finished) {
    step_ms.push_back(row.file->last_step()->step_ms);
    busy_ms.push_back(row.file->last_step()->busy_ms);
    exposed_ms.push_back(row.file->last_step()->exposed_communication_ms);
    steps.push_back(double(row.file->steps_finished()));
  }
  text += format("over %zu ranks (last finished step):\n", finished.size());
  text += distribution("  step ms", step_ms) + distribution("  busy ms", busy_ms) +
          distribution("  exposed ms", exposed_ms) + distribution("  steps", steps, 0);
  return text;
}

// When a rank's last finished step ended, in unix ns; nullopt without one or without a clock.
std::optional<TimeNs> last_step_end(const RankRow& row) {
  const LiveStep* last = row.file->last_step();
  if (!last) return std::nullopt;
  return row.file->wall_time(last->start + TimeNs(last->step_ms * 1e6));
}

// The median step time (ms) of the ranks' last finished steps; 0 without any.
double median_last_step_ms(const std::vector<RankRow>& rows) {
  std::vector<double> step_ms;
  for (const RankRow& row : rows) {
    if (const LiveStep* last = row.file->last_step()) step_ms.push_back(last->step_ms);
  }
  return step_ms.empty() ? 0.0 : analysis::median(step_ms);
}

// "rank 3" or "ranks 0-36, 38-63" (collective_mismatch.h's runs).
std::string rank_runs(const std::vector<int32_t>& ranks) {
  return (ranks.size() > 1 ? "ranks " : "rank ") + analysis::rank_runs(ranks);
}

// Under the stalled line, per communicator some rank is stuck in: the collective, the ranks
// inside it and for how long, and the ranks that never entered it (collective_mismatch.h, from
// the collective_open records the recorder writes while a rank waits).
std::string waiting_lines(const std::vector<RankRow>& rows, TimeNs now_unix_ns) {
  std::vector<analysis::RankCollectives> ranks;
  for (const RankRow& row : rows) ranks.push_back({row.rank, row.file->collectives()});
  std::string text;
  for (const analysis::CollectiveMismatch& stuck : analysis::collective_mismatches(ranks)) {
    if (stuck.waiting.empty()) continue;
    double longest_s = 0;
    const RankRow* missing_row = nullptr;  // the one rank that never entered, when one
    const analysis::CollectiveState* missing = nullptr;
    for (size_t i = 0; i < rows.size(); ++i) {
      const bool is_missing =
          stuck.never_entered.size() == 1 && rows[i].rank == stuck.never_entered.front();
      if (is_missing) missing_row = &rows[i];
      for (const analysis::CollectiveState& state : ranks[i].collectives) {
        if (state.comm_id != stuck.comm_id) continue;
        if (is_missing) missing = &state;
        const std::optional<TimeNs> entered = rows[i].file->wall_time(state.open_entered);
        if (state.has_open && state.open_sequence >= stuck.sequence && entered &&
            now_unix_ns > *entered) {
          longest_s = std::max(longest_s, double(now_unix_ns - *entered) * 1e-9);
        }
      }
    }
    text += format("  in %s #%u of comm %016llx: %s waiting", analysis::comm_kind_name(stuck.kind),
                   stuck.sequence, static_cast<unsigned long long>(stuck.comm_id),
                   rank_runs(stuck.waiting).c_str());
    if (longest_s > 0) text += format(" (up to %.0f s)", longest_s);
    if (!stuck.never_entered.empty()) {
      text += "; never entered it: " + rank_runs(stuck.never_entered);
      if (missing && missing->has_completed) {
        text +=
            format(" (last completed %s #%u)", analysis::comm_kind_name(missing->completed_kind),
                   missing->completed_sequence);
      }
      if (missing_row) text += missing_row->ended();
    }
    text += "\n";
  }
  return text;
}

// The two ways a hang or a dead rank shows in growing traces, each a line when it is there.
// Behind: ranks more than a step behind the newest step whose last step also ended a while
// (kTopBehindSeconds, kTopLagSteps steps) before the newest one (a process that stopped while
// the others went on, or a trace that stopped growing). The time matters as much as the count:
// each recorder flushes every 100 ms, so a live rank's file can trail another's by several
// short steps. Stalled: no rank still writing has finished a step for a while
// (`stall_after_s`, kTopLagSteps steps). In lockstep training a dead or hung rank soon holds
// the others in a collective, so the second is the usual sign.
std::string progress_lines(const std::vector<RankRow>& rows, TimeNs now_unix_ns,
                           double stall_after_s) {
  const double step_s = median_last_step_ms(rows) * 1e-3;
  int64_t newest = -1;
  std::optional<TimeNs> newest_end, newest_running_end;
  for (const RankRow& row : rows) {
    const std::optional<TimeNs> ended = last_step_end(row);
    if (!ended) continue;
    newest = std::max(newest, row.file->last_step()->step);
    newest_end = std::max(newest_end.value_or(*ended), *ended);
    if (row.writing()) {
      newest_running_end = std::max(newest_running_end.value_or(*ended), *ended);
    }
  }
  std::string text;
  std::vector<int32_t> gone;
  for (const RankRow& row : rows) {
    if (row.gone) gone.push_back(row.rank);
  }
  if (!gone.empty()) {
    text += format(
        "gone: %s ended without closing %s (no such process on this host any "
        "more: killed, e.g. SIGKILL or the OOM killer?)\n",
        rank_runs(gone).c_str(), gone.size() > 1 ? "their traces" : "its trace");
  }
  if (!newest_end) return text;
  // A rank with no finished step counts as at step -1 that ended when its recording began.
  const double lag_s = std::max(kTopBehindSeconds, kTopLagSteps * step_s);
  std::vector<std::pair<RankRow, int64_t>> behind;
  for (const RankRow& row : rows) {
    const LiveStep* last = row.file->last_step();
    const std::optional<TimeNs> ended =
        last ? last_step_end(row) : row.file->wall_time(row.file->recording()->begin);
    const int64_t step = last ? last->step : -1;
    if (ended && step < newest - 1 && double(*newest_end - *ended) * 1e-9 > lag_s) {
      behind.push_back({row, step});
    }
  }
  std::stable_sort(behind.begin(), behind.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  if (!behind.empty()) {
    text += format("behind: %zu rank(s) more than a step behind step %lld:", behind.size(),
                   static_cast<long long>(newest));
    for (size_t i = 0; i < behind.size() && i < 3; ++i) {
      const auto& [row, step] = behind[i];
      text += step < 0 ? format("%s rank %d with no step finished", i ? "," : "", row.rank)
                       : format("%s rank %d at step %lld", i ? "," : "", row.rank,
                                static_cast<long long>(step));
      const std::optional<TimeNs> ended = last_step_end(row);
      if (!row.writing()) {
        text += row.ended();
      } else if (ended && now_unix_ns > *ended) {
        text += format(" (%.0f s ago)", double(now_unix_ns - *ended) * 1e-9);
      }
    }
    if (behind.size() > 3) text += format(", +%zu more", behind.size() - 3);
    text += "\n";
  }
  if (!newest_running_end || now_unix_ns <= *newest_running_end) return text;
  const double idle_s = double(now_unix_ns - *newest_running_end) * 1e-9;
  if (idle_s > std::max(stall_after_s, kTopLagSteps * step_s)) {
    text += format(
        "stalled: no rank still writing has finished a step for %.0f s (a step took %.1f ms): "
        "hung in a collective, paused (checkpoint, evaluation), or killed without closing its "
        "traces?\n",
        idle_s, step_s * 1e3);
    text += waiting_lines(rows, now_unix_ns);
  }
  return text;
}

struct LayerRow {
  uint32_t layer = 0;
  double max_over_mean = 0;
  std::string line;
};

// One line per MoE layer of `step`, the loads combined across ranks as every report does.
std::string layer_rows(const std::vector<RankRow>& rows, int64_t step) {
  analysis::TraceModel samples;  // only the expert-load samples of `step`
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const analysis::LiveExpertLoad& load : rows[i].file->loads(step)) {
      analysis::ExpertLoadSample sample = load.sample;
      sample.process = static_cast<uint32_t>(i);
      sample.offset = static_cast<uint32_t>(samples.expert_tokens.size());
      sample.num_experts = static_cast<uint32_t>(load.tokens.size());
      samples.expert_tokens.insert(samples.expert_tokens.end(), load.tokens.begin(),
                                   load.tokens.end());
      samples.expert_loads.push_back(sample);
    }
  }
  analysis::StepRankFilter filter;
  filter.step_first = filter.step_last = step;
  std::vector<LayerRow> layers;
  for (const analysis::LayerStepLoad& load : analysis::layer_step_loads(samples, filter)) {
    if (load.tokens.empty()) continue;
    const double total = std::accumulate(load.tokens.begin(), load.tokens.end(), 0.0);
    const int dead = int(analysis::count_dead_experts(load.tokens));
    std::vector<size_t> hot = analysis::hot_experts(load.tokens);
    std::sort(hot.begin(), hot.end(), [&](size_t a, size_t b) {
      return load.tokens[a] != load.tokens[b] ? load.tokens[a] > load.tokens[b] : a < b;
    });
    std::string experts;
    for (size_t i = 0; i < hot.size() && i < 4; ++i) {
      experts += format("%se%zu %.0f%%", i ? ", " : "", hot[i],
                        100.0 * analysis::share(load.tokens[hot[i]], total));
    }
    if (hot.size() > 4) experts += format(", +%zu more", hot.size() - 4);
    const double max_over_mean = analysis::max_over_mean(load.tokens);
    layers.push_back({load.layer, max_over_mean,
                      format("%-6u %9.2f %6.2f %5d  %s\n", load.layer, max_over_mean,
                             analysis::coefficient_of_variation(load.tokens), dead,
                             experts.empty() ? "-" : experts.c_str())});
  }
  if (layers.empty()) return "";  // no expert loads recorded: not an MoE model, or not yet
  std::string text = format("%-6s %9s %6s %5s  %s\n", "layer", "max/mean", "cv", "dead",
                            "hot experts (share of tokens)");
  if (layers.size() <= kTopLayerRows) {
    for (const LayerRow& layer : layers) text += layer.line;
    return text;
  }
  // Many layers: the most imbalanced ones, then the distribution over all.
  std::vector<double> values;
  for (const LayerRow& layer : layers) values.push_back(layer.max_over_mean);
  std::stable_sort(layers.begin(), layers.end(), [](const LayerRow& a, const LayerRow& b) {
    return a.max_over_mean > b.max_over_mean;
  });
  const size_t shown = kTopLayerRows / 2;
  for (size_t i = 0; i < shown; ++i) text += layers[i].line;
  text += format("+%zu more layers; over all %zu:\n", layers.size() - shown, layers.size());
  return text + distribution("  max/mean", values, 2);
}

}  // namespace

std::string render_top_frame(const analysis::LiveRunState& run, TimeNs now_unix_ns,
                             double stall_after_s) {
  const auto& files = run.files();
  const std::vector<int32_t> numbers = run.ranks();
  std::vector<RankRow> rows;
  size_t readable = 0, running = 0;
  analysis::StepSource source = analysis::StepSource::kNone;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i]->readable()) continue;
    ++readable;
    // A process of the run without steps (the launcher, a helper) is not a rank of the job.
    if (!files[i]->has_steps()) continue;
    if (rows.empty()) source = files[i]->step_source();
    const analysis::ProcessTrack& recording = *files[i]->recording();
    rows.push_back({numbers[i], files[i],
                    !files[i]->complete() && process_gone(recording.host, recording.pid)});
    running += rows.back().writing() ? 1 : 0;
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const RankRow& a, const RankRow& b) { return a.rank < b.rank; });
  std::string text = format("moescope top: %zu ranks (%zu still writing), steps from %s",
                            rows.size(), running, analysis::step_source_name(source));
  if (rows.size() < readable) {
    text += format("; %zu other process(es) without steps", readable - rows.size());
  }
  text += "\n" + rank_rows(rows) + progress_lines(rows, now_unix_ns, stall_after_s);
  const int64_t common = run.common_step();
  if (common < 0) return text + "no step finished on every rank yet\n";
  // Busy time of `common` on each rank: the straggler is the busiest.
  std::vector<double> busy;
  std::vector<int32_t> ranks;
  double exposed = 0;
  for (const RankRow& row : rows) {
    const LiveStep* step = row.file->step(common);
    if (!step) continue;
    busy.push_back(step->busy_ms);
    ranks.push_back(row.rank);
    exposed += step->exposed_communication_ms;
  }
  text += format("\nstep %lld (finished on every rank):", static_cast<long long>(common));
  if (busy.size() >= 2) {
    size_t slowest = size_t(std::max_element(busy.begin(), busy.end()) - busy.begin());
    text += format(" slowest rank %d, +%.1f ms busy over the median of the others;", ranks[slowest],
                   analysis::straggler_excess(busy, slowest));
  }
  if (!busy.empty()) {
    text += format(" exposed communication %.1f ms per rank\n", exposed / double(busy.size()));
  } else {
    text += "\n";
  }
  return text + layer_rows(rows, common);
}

}  // namespace moescope::cli
