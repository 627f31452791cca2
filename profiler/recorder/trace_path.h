// Who this process is (rank, host, pid, command line) and where its trace goes.
#pragma once

#include <string>

namespace moescope::recorder {

struct ProcessIdentity {
  int rank = -1;        // from RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, then LOCAL_RANK
  int local_rank = -1;  // from LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
  int world_size = -1;  // from WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
  int pid = 0;
  std::string host;
  std::string command_line;  // /proc/self/cmdline, arguments joined by spaces
};

ProcessIdentity current_process_identity();

// Expands %r (rank, 0 when unknown), %p (pid), %h (host) and %% in `pattern`.
std::string expand_trace_path(const std::string& pattern, const ProcessIdentity& identity);

// The file header's metadata: identity, clock, start time, merged with `extra_json` (an
// object; ignored with a warning if it does not parse).
std::string build_metadata_json(const ProcessIdentity& identity, const char* extra_json,
                                unsigned long long start_ns);

}  // namespace moescope::recorder
