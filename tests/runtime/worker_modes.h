// The modes of moe_ep_worker (ep_worker.cpp dispatches on the mode name), each defined in its
// own <mode>_worker_mode.cpp, and what several of them share.
#pragma once

#include "moescope/runtime/expert_parallel.h"
#include "moescope/runtime/moe_config.h"

using moescope::runtime::ExpertParallelGroup;
using moescope::runtime::MoEConfig;

int run_rebalance(const ExpertParallelGroup& group);             // rebalance_worker_mode.cpp
int run_memory(const ExpertParallelGroup& group);                // memory_worker_mode.cpp
int run_rebalance_checkpoint(const ExpertParallelGroup& group);  // rebalance_checkpoint_...cpp

/// A small layer (hidden 16, ffn 12, 8 experts, top-2) whose gate skew makes expert 7 the
/// hottest, with one redundant slot per rank of `group`: the rebalancer has work to do.
MoEConfig hot_expert_config(const ExpertParallelGroup& group);
