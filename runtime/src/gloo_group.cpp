#include "moescope/runtime/gloo_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace moescope::runtime {

ExpertParallelGroup connect_gloo_group(const GlooGroupOptions& options) {
  TORCH_CHECK(options.world_size >= 1, "connect_gloo_group: world_size must be >= 1, got ",
              options.world_size);
  TORCH_CHECK(options.rank >= 0 && options.rank < options.world_size, "connect_gloo_group: rank ",
              options.rank, " is outside [0, ", options.world_size, ")");
  TORCH_CHECK(options.port > 0 && options.port < 65536, "connect_gloo_group: bad port ",
              options.port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(options.port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = false;
    store_options.timeout = options.timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(options.host, store_options);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
    ExpertParallelGroup group;
    group.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank,
                                                                options.world_size, gloo_options);
    return group;
  } catch (const c10::Error& error) {
    TORCH_CHECK(false, "connect_gloo_group: rank ", options.rank, " of ", options.world_size,
                " could not join the group at ", options.host, ":", options.port, ": ",
                error.what_without_backtrace());
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "connect_gloo_group: rank ", options.rank, " of ", options.world_size,
                " could not join the group at ", options.host, ":", options.port, ": ",
                error.what());
  }
}

}  // namespace moescope::runtime
