// moe_train: a small MoE transformer language model trained with moescope::runtime::MoELayer.
//   moe_train --steps 100 --gate-skew 3 --skew-layer 1
//   torchrun --no-python --nproc_per_node 2 build/bin/moe_train --balance aux-free
//   moescope record -o run.%r.moetrace -- torchrun --no-python --nproc_per_node 2
//   build/bin/moe_train
#include <torch/cuda.h>

#include <cstdio>

#include "moescope/runtime/host_malloc_tuning.h"
#include "train_options.h"
#include "training_run.h"

int main(int argc, char** argv) {
  moe_train::TrainOptions options;
  int exit_code = 0;
  if (!moe_train::parse_train_options(argc, argv, options, exit_code)) return exit_code;
  if (options.device == "cuda" && !torch::cuda::is_available()) {
    // Exit code 77, as every GPU check of tests/device (no_cuda_device.h): the device-build
    // test and run.sh's dry run expect exactly this.
    std::printf("moe_train: no CUDA device (--device cuda, none visible to LibTorch)\n");
    return 77;
  }
  if (options.malloc_tuning) moescope::runtime::tune_glibc_malloc_for_training();
  return moe_train::run_training(options);
}
