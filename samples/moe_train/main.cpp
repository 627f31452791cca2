// moe_train: a small MoE transformer language model trained with moescope::runtime::MoELayer.
//   moe_train --steps 100 --gate-skew 3 --skew-layer 1
//   torchrun --no-python --nproc_per_node 2 build/bin/moe_train --balance aux-free
//   moescope record -o run.%r.moetrace -- torchrun --no-python --nproc_per_node 2
//   build/bin/moe_train
#include <malloc.h>

#include "train_options.h"
#include "training_run.h"

int main(int argc, char** argv) {
  moe_train::TrainOptions options;
  int exit_code = 0;
  if (!moe_train::parse_train_options(argc, argv, options, exit_code)) return exit_code;
  if (options.malloc_tuning) {
    // glibc raises its mmap threshold only after freeing a large mmapped block, and trims the
    // heap top past twice that: a training step's many short-lived tensors of 0.1-10 MB then
    // go back to the system and are faulted in again next step (~9 MB per step on the demo
    // model). Fixed thresholds keep them in the heap. Before any large allocation.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }
  return moe_train::run_training(options);
}
