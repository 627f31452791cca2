// Chrome trace JSON export (Perfetto, chrome://tracing, HolisticTraceAnalysis).
//
// One process per rank (pid = rank); one thread per CPU thread (tid = OS thread id, else
// stream), per CUDA stream (tid = 1000000 + device * 1000 + stream) and per communicator
// (tid = 2000000 + index), each named with an M event. ts/dur are microseconds with the
// nanoseconds as 3 decimals. CPU spans are X events (cat user_annotation), launches are
// cuda_runtime X events, GPU work is kernel / gpu_memcpy / gpu_memset X events with
// args.stream, args.device and args.correlation (what HTA reads), host syncs cuda_sync;
// ac2g flows (s -> f, bp "e") join each launch to its GPU work; memory in use per category and
// expert load per layer are C counters. The top level carries distributedInfo {backend, rank,
// world_size} of the first rank written. Output is streamed through a fixed buffer: memory does
// not grow with the trace. Every string is escaped; invalid UTF-8 becomes U+FFFD.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct ChromeExportOptions {
  int32_t only_rank = -1;  // export one rank (-1 = all ranks in one file)
  bool flows = true;
  bool counters = true;
};

struct ChromeExportResult {
  bool ok = false;
  std::string error;
  uint64_t events = 0;
  uint64_t bytes = 0;
};

ChromeExportResult export_chrome_trace(const TraceModel& model, std::FILE* out,
                                       const ChromeExportOptions& options = {});
ChromeExportResult export_chrome_trace(const TraceModel& model, const std::string& path,
                                       const ChromeExportOptions& options = {});

// Appends `text` as a JSON string literal (with quotes) to `out` (exposed for tests).
void append_json_string(std::string& out, std::string_view text);

}  // namespace moescope::analysis
