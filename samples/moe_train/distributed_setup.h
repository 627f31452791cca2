// How moe_train finds its peers: the environment a launcher (torchrun, or a test spawning
// processes) sets, and the expert-parallel group built from it. The experts are spread over the
// whole world (expert-parallel size = world size); every other parameter is replicated.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "moescope/runtime/expert_parallel.h"

namespace moe_train {

struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent already serves a TCPStore on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE).
  bool launcher_serves_store = false;
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and
/// TORCHELASTIC_USE_AGENT_STORE. Missing variables mean one process. Throws std::runtime_error
/// naming the variable when a value is malformed or inconsistent.
LaunchEnvironment read_launch_environment();

/// The expert-parallel group over the world: Gloo (runtime's connect_gloo_group) on CPU, NCCL on
/// CUDA. World size 1 gives the one-process group.
moescope::runtime::ExpertParallelGroup connect_expert_parallel_group(const LaunchEnvironment& env,
                                                                     const c10::Device& device);

/// An NCCL group on `device` (nccl_group.cpp; only in builds with torch's CUDA libraries).
moescope::runtime::ExpertParallelGroup connect_nccl_group(const LaunchEnvironment& env,
                                                          const c10::Device& device);

}  // namespace moe_train
