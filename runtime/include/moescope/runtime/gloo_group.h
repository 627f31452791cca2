// A CPU expert-parallel group over loopback or a LAN: c10d TCPStore + ProcessGroupGloo.
// Built when Gloo's headers are found (Debian's libgloo-dev; torch links Gloo itself but does
// not ship its headers); MOESCOPE_RUNTIME_HAVE_GLOO is defined then.
#pragma once

#include <chrono>
#include <string>

#include "moescope/runtime/expert_parallel.h"

namespace moescope::runtime {

struct GlooGroupOptions {
  std::string host = "127.0.0.1";  // rank 0 listens here; the others connect to it
  int port = 29500;
  int rank = 0;
  int world_size = 1;
  // Every collective fails with a c10::Error after this long (a dead peer never hangs us).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

/// Connects the world_size processes (each calls this with its own rank) and returns the group.
/// Throws a c10::Error naming host, port and rank when the rendezvous fails.
ExpertParallelGroup connect_gloo_group(const GlooGroupOptions& options);

}  // namespace moescope::runtime
