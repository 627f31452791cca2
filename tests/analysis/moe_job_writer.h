// Writes the traces of a synthetic N-rank MoE training job, one .moetrace per rank, with
// problems planted where the analyses must find them. Used by the summary tests and by
// bench/moe_job_traces (the 64 / 1,024 / 4,096-rank benchmark of docs/performance.md).
//
// Each step of each rank: a step marker and a "train_step" span; per MoE layer, attention and
// expert GEMM kernels (each with its cudaLaunchKernel call), an all-to-all over the rank's
// expert-parallel group with uneven splits (bytes per peer follow the tokens its experts
// receive), an allocation and its free, and the layer's expert load; then a data-parallel
// all-reduce over every rank. Ranks are simulated together on one clock: a collective starts
// when its last member enters, so a slow rank makes the others wait (their communication
// kernels spin), as NCCL does.
//
// Planted: `slow_rank` computes `slow_factor` x slower from `slow_from_step` on; every rank of
// host `slow_host` computes `host_factor` x slower throughout; expert `hot_expert` of layer
// `hot_layer` receives `hot_factor` x the tokens of the others. Jitter is deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moescope::testing {

struct MoeJobConfig {
  int ranks = 64;
  int steps = 100;
  int layers = 2;
  int experts = 64;
  int ranks_per_host = 8;
  int expert_parallel = 16;  // ranks per all-to-all group
  int kernels_per_layer = 8;
  int slow_rank = 21;
  int slow_from_step = 60;
  double slow_factor = 1.18;
  int slow_host = 5;  // host index; -1 = none
  double host_factor = 1.10;
  int hot_layer = 1;
  int hot_expert = 17;
  double hot_factor = 3.0;
  std::string run_id = "synthetic-moe-job";
  int64_t start_unix_ns = 1'700'000'000'000'000'000;  // when the recording started (metadata)
  unsigned threads = 0;                               // writer threads, 0 = hardware concurrency
  // A stream's records go to a chunk of about this many bytes (the recorder's flush size);
  // smaller chunks stand in for a long run's many flushes (tests of partial reads).
  size_t chunk_bytes = size_t(1) << 20;
  // Names defined in a first chunk, as a live recorder does (a trace read while it is written
  // has them), besides the end chunk.
  bool strings_first = false;
  bool step_markers = true;  // else the steps are the "train_step" spans (a guessed range)
  // >= 0: the job hangs in its last step's data-parallel all-reduce. Every other rank enters it
  // and waits (a collective_open record, as the recorder writes a second in, and no op); this
  // rank never enters it. No step of the last ends and no file is closed (no end chunk).
  int hang_missing_rank = -1;
  // > 0 with hang_missing_rank: the recording is stopped this long after the hang's
  // all-reduce was entered (each rank's closing statistics record, as the recorder writes at
  // stop, though the job itself never ends).
  int64_t hang_stopped_after_ns = 0;
};

// "node-005": the host name of host index 5.
std::string moe_job_host_name(int host);

// Writes DIR/job.<rank>.moetrace for every rank; returns the paths in rank order, or an empty
// list after printing why on stderr. `events` (if given) receives the records written.
std::vector<std::string> write_moe_job(const MoeJobConfig& config, const std::string& directory,
                                       uint64_t* events = nullptr);

// Where each chunk of the trace at `path` ends (file offsets; empty when it cannot be opened):
// to cut or grow a written trace as a writer still writing it leaves it.
std::vector<uint64_t> trace_chunk_ends(const std::string& path);

}  // namespace moescope::testing
