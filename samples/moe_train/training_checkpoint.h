// moe_train's checkpoints (--checkpoint, --checkpoint-every, --resume): saved atomically, and
// refused on resume when the run's setup or options do not match what the checkpoint holds.
#pragma once

#include <torch/optim/adamw.h>

#include <cstdint>
#include <string>

#include "cold_expert_offload.h"
#include "distributed_setup.h"
#include "moe_transformer.h"
#include "moescope/runtime/expert_rebalancer.h"
#include "train_options.h"

namespace moe_train {

// Runtime state beyond the model and the main AdamW that a checkpoint carries when the run
// has it: the rebalancer's placements and forecast (--rebalance-every), the routed experts'
// AdamW state (--offload-cold-experts).
struct CheckpointExtras {
  moescope::runtime::ExpertRebalancer* rebalancer = nullptr;
  ColdExpertOffload* offload = nullptr;
};

// `path` itself for one rank, else one file per rank: PATH.rankN.
std::string checkpoint_path_for_rank(const std::string& path, const LaunchEnvironment& env);

// What must match between a checkpoint and the run resuming from it.
std::string checkpoint_signature(const TrainOptions& options, const LaunchEnvironment& env);

// Writes PATH.tmp and renames it over `path`: a crash mid-save keeps the previous checkpoint.
void save_checkpoint(const std::string& path, int64_t next_step, const std::string& signature,
                     MoETransformer& model, torch::optim::AdamW& optimizer,
                     const CheckpointExtras& extras);

// Loads `path` into the model, optimizer and extras; returns the step to resume at. Throws
// (c10::Error, naming the checkpoint) when it is missing or does not match this run.
int64_t load_checkpoint(const std::string& path, const std::string& signature,
                        const c10::Device& device, MoETransformer& model,
                        torch::optim::AdamW& optimizer, const CheckpointExtras& extras);

}  // namespace moe_train
