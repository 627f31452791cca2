// A rank's summary: the small, versioned file `moescope summarize` writes next to a trace
// (run.3.moetrace -> run.3.moesummary) with everything `moescope report` needs from that rank,
// so a job of thousands of ranks is reported without loading one event. docs/trace-format.md
// ("Rank summaries") gives the layout; its size grows with steps and collectives, not events.
//
// What it holds:
//   - identity: run id, rank, world size, host, pid, the trace's metadata, the trace's size
//     (a summary of a trace that changed since is stale and not used);
//   - the skeleton of the rank's ProcessTrack: steps and step markers, clock-sync points, every
//     collective (kind, communicator, sequence, bytes, entry/start/end times, all-to-all
//     splits), the event counts; no spans, kernels, copies, counters or memory events;
//   - its model-wide samples: expert loads per layer and step, expert values, router
//     statistics, rebalancing decisions;
//   - its RankFacts (rank_facts.h): per-step time breakdown (busy / idle / exposed
//     communication), phase split, memory peaks, expert compute time, capture notes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moescope/analysis/rank_facts.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// 2: the facts end with the rank's time per step in named spans (`moescope diff` reads them).
// 3: each rebalancing decision carries the numbers it was taken on (trace format 3).
inline constexpr uint32_t kRankSummaryVersion = 4;
inline constexpr const char* kRankSummaryExtension = ".moesummary";

struct RankSummary {
  std::string run_id;          // see run_id_of
  uint64_t trace_bytes = 0;    // size of the trace it summarises
  int32_t metadata_rank = -1;  // the rank the trace's metadata names, -1 when none
  StepSource step_source = StepSource::kNone;
  ProcessTrack process;  // the skeleton (above); CommOp::name indexes `names`
  std::vector<std::string> names;
  ModelSampleArrays samples;  // `process` = 0, offsets into this summary's tails
  RankFacts facts;
  std::vector<LoadError> errors;  // what loading the trace reported (damage it read around)
  uint64_t triggers = 0;          // flight-recorder triggers: such dumps report from the trace
  // Collectives the trace ends inside (collectives_at_end: a job stopped while it hung): such a
  // rank reports from its trace too, whose collective_open records name the hang.
  uint64_t collectives_open_at_end = 0;
};

// "x.moetrace" -> "x.moesummary"; any other name gets the extension appended.
std::string summary_path_for(const std::string& trace_path);
bool is_summary_path(const std::string& path);

// The run a trace belongs to: the metadata's "run_id" when the launcher or user set one (the
// generator and `moescope record --metadata` can), else a hash of its command line and world
// size (ranks of one job share both; two runs of the same command do too).
std::string run_id_of(const std::string& metadata_json);

// The summary of `model.processes[process]` of a model loaded from that one trace.
RankSummary summarize_process(const TraceModel& model, size_t process, uint64_t trace_bytes);

// The file's bytes, and back. The payload is one zstd frame unless `compress` is false (tests
// and the fuzzer write plain payloads to reach the section decoder). Decoding never throws or
// crashes on any input: false with a message naming what was wrong (and where) instead.
std::string encode_rank_summary(const RankSummary& summary, bool compress = true);
bool decode_rank_summary(std::string_view bytes, RankSummary& summary, std::string& error);

bool write_rank_summary(const std::string& path, const RankSummary& summary, std::string& error);
bool read_rank_summary(const std::string& path, RankSummary& summary, std::string& error);

}  // namespace moescope::analysis
