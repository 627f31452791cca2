// The NCCL expert-parallel group for moe_train on GPUs. Its own translation unit because
// ProcessGroupNCCL's header needs USE_C10D_NCCL, nccl.h and the CUDA headers.
// Untested on the CPU development machine; exercised on GPUs only (tests/device/).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <c10/cuda/CUDAFunctions.h>

#include "distributed_setup.h"

namespace moe_train {

moescope::runtime::ExpertParallelGroup connect_nccl_group(const LaunchEnvironment& env,
                                                          const c10::Device& device) {
  TORCH_CHECK(device.is_cuda() && device.has_index(),
              "moe_train: an NCCL group needs a CUDA device with an index, got ", device.str());
  c10::cuda::set_device(device.index());
  c10d::TCPStoreOptions store_options;
  // Under torchrun every rank joins the agent's store as a client; otherwise rank 0 serves it.
  store_options.isServer = !env.launcher_serves_store && env.rank == 0;
  store_options.port = static_cast<uint16_t>(env.master_port);
  store_options.numWorkers = env.world_size;
  store_options.waitWorkers = false;
  store_options.timeout = std::chrono::seconds(120);
  try {
    auto tcp_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    auto store = c10::make_intrusive<c10d::PrefixStore>("moe_train_ep", tcp_store);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = std::chrono::seconds(120);
    auto backend =
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
    backend->setBoundDeviceId(device);
    moescope::runtime::ExpertParallelGroup group;
    group.backend = backend;
    return group;
  } catch (const c10::Error& error) {
    TORCH_CHECK(false, "moe_train: rank ", env.rank, " of ", env.world_size,
                " could not join the NCCL group at ", env.master_addr, ":", env.master_port, ": ",
                error.what_without_backtrace());
  }
}

}  // namespace moe_train
