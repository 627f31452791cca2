// Import of PyTorch profiler (Kineto) Chrome trace JSON into the trace model, so `report`,
// `export` and the viewer work on traces people already have. load_traces() calls it for paths
// ending in .json or .json.gz; one file is one process (rank from distributedInfo.rank).
//
// Mapping: X events of category kernel / gpu_memcpy / gpu_memset / cuda_sync -> GPU stream ops
// (device = args.device, stream = args.stream, else tid); cuda_runtime / cuda_driver -> API
// calls (linked to GPU work by args.correlation); other X events -> CPU spans on (pid, tid);
// "[memory]" instants -> memory events; C events -> counters; thread_name M events -> names.
#pragma once

#include <string>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// The key of ProcessTrack::metadata_json under which an imported trace keeps its
// baseTimeNanoseconds (the unix time its timestamps count from), where the file has one.
inline constexpr const char* kKinetoBaseTimeKey = "base_time_ns";

// Loads one Kineto JSON file as a model of one process (same as load_traces({path})).
TraceModel import_kineto_json(const std::string& path);

}  // namespace moescope::analysis
