// One training run of moe_train: join the expert-parallel group, build (or resume) the model
// and optimizer, train, checkpoint. Torch-free interface so main() stays cheap to compile.
//
// Output, one line each, flushed (tests and scripts parse it):
//   rank 0:     "step <n> loss <x> aux <x> max/mean L0 <x> L1 <x> ... dropped <n> step_ms <x> tok/s
//   <x>" every rank: "expert_load rank <r> step <n> layer <l> local <c0> <c1> ..."
//   (--print-expert-load) rank 0:     "moe_train: loss <first> -> <last> (mean of the first/last 5
//   steps of this run)"
#pragma once

#include "train_options.h"

namespace moe_train {

/// Runs the training described by `options` in this process (one rank of the world the
/// environment describes). Returns the process exit code; errors are printed to stderr.
int run_training(const TrainOptions& options);

}  // namespace moe_train
