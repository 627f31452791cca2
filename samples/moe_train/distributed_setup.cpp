#include "distributed_setup.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#ifdef MOESCOPE_RUNTIME_HAVE_GLOO
#include "moescope/runtime/gloo_group.h"
#endif

namespace moe_train {
namespace {

// The integer value of environment variable `name`, or `fallback` when it is unset.
int integer_from_environment(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1 << 30) {
    throw std::runtime_error(std::string("moe_train: environment variable ") + name + "='" + text +
                             "' is not a non-negative integer");
  }
  return static_cast<int>(value);
}

}  // namespace

LaunchEnvironment read_launch_environment() {
  LaunchEnvironment env;
  env.world_size = integer_from_environment("WORLD_SIZE", 1);
  env.rank = integer_from_environment("RANK", 0);
  env.local_rank = integer_from_environment("LOCAL_RANK", env.rank);
  env.master_port = integer_from_environment("MASTER_PORT", 29500);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) env.master_addr = addr;
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) {
    env.launcher_serves_store = std::string(agent) == "True" || std::string(agent) == "1";
  }
  if (env.world_size < 1) throw std::runtime_error("moe_train: WORLD_SIZE must be >= 1");
  if (env.rank >= env.world_size) {
    throw std::runtime_error("moe_train: RANK=" + std::to_string(env.rank) +
                             " is not below WORLD_SIZE=" + std::to_string(env.world_size));
  }
  if (env.world_size > 1 && (env.master_port < 1 || env.master_port > 65534)) {
    throw std::runtime_error("moe_train: MASTER_PORT=" + std::to_string(env.master_port) +
                             " is not a usable port");
  }
  return env;
}

moescope::runtime::ExpertParallelGroup connect_expert_parallel_group(const LaunchEnvironment& env,
                                                                     const c10::Device& device) {
  if (env.world_size == 1) return {};
  if (device.is_cuda()) return connect_nccl_group(env, device);
#ifdef MOESCOPE_RUNTIME_HAVE_GLOO
  moescope::runtime::GlooGroupOptions options;
  options.host = env.master_addr;
  options.rank = env.rank;
  options.world_size = env.world_size;
  // connect_gloo_group makes rank 0 serve its own TCPStore. Under torchrun the agent's store
  // already holds MASTER_PORT, so ours takes the next port (on rank 0's host, like the agent's).
  options.port = env.launcher_serves_store ? env.master_port + 1 : env.master_port;
  return moescope::runtime::connect_gloo_group(options);
#else
  TORCH_CHECK(false, "moe_train: WORLD_SIZE=", env.world_size,
              " on CPU needs Gloo groups, and this build has none (install libgloo-dev and "
              "rebuild moescope_runtime)");
#endif
}

#ifndef MOE_TRAIN_HAVE_NCCL
moescope::runtime::ExpertParallelGroup connect_nccl_group(const LaunchEnvironment& env,
                                                          const c10::Device& device) {
  TORCH_CHECK(false, "moe_train: WORLD_SIZE=", env.world_size, " on ", device.str(),
              " needs NCCL, and this build of moe_train has no torch CUDA libraries");
}
#endif

}  // namespace moe_train
