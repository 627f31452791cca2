// moe_ep_worker: one rank of the expert-parallel tests (expert_parallel_test.cpp launches 2 or 4
// of these on loopback). Modes:
//   equality   for several configs, runs the expert-parallel MoELayer on this rank's batch and
//              a one-process layer holding all experts on every rank's batch, then prints the
//              largest differences of outputs and gradients ("RESULT ..." lines).
//   dead_peer  the last rank exits right after joining; the others run forward and must get a
//              c10::Error, printed as "DEAD_PEER_ERROR seconds=... message=...".
//   rebalance  skewed training with redundant experts and an ExpertRebalancer
//              (rebalance_worker_mode.cpp).
//   memory     dispatch buffer pool and receive cap in an expert-parallel layer
//              (memory_worker_mode.cpp).
//   rebalance_checkpoint  an ExpertRebalancer saved after it moved experts continues
//              identically when loaded into a fresh one (rebalance_checkpoint_worker_mode.cpp).
//
// usage: moe_ep_worker MODE RANK WORLD PORT
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "moescope/runtime/gloo_group.h"
#include "moescope/runtime/moe_layer.h"
#include "worker_modes.h"

using namespace moescope::runtime;

namespace {

struct Case {
  const char* name;
  MoEConfig config;
  bool last_rank_empty = false;  // the last rank sends an empty batch
};

std::vector<Case> cases() {
  MoEConfig base;
  base.hidden_size = 16;
  base.ffn_hidden_size = 12;
  base.num_experts = 8;
  base.top_k = 2;
  base.init_std = 0.3;
  std::vector<Case> all;
  all.push_back({"dropless", base});
  MoEConfig shared = base;
  shared.num_shared_experts = 1;
  shared.aux_loss_coeff = 0.01;
  shared.z_loss_coeff = 0.001;
  all.push_back({"shared_aux_empty_rank", shared, true});
  MoEConfig grouped = base;
  grouped.score_function = ScoreFunction::kSigmoid;
  grouped.normalize_top_k_weights = true;
  grouped.num_groups = 4;
  grouped.group_top_k = 2;
  grouped.capacity_factor = 0.7;
  grouped.drop_policy = DropPolicy::kByPosition;
  grouped.gate_logit_skew = make_gate_skew(8, 2.0);  // uneven splits between ranks
  all.push_back({"grouped_capacity_skew", grouped});
  return all;
}

int64_t tokens_of_rank(int64_t rank, int64_t world, bool last_empty) {
  if (last_empty && rank == world - 1) return 0;
  return 24 + 7 * rank;
}

double diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) return 0.0;
  return (a - b).abs().max().item<double>();
}

int run_equality(const ExpertParallelGroup& group) {
  const int64_t rank = group.rank(), world = group.size();
  for (const Case& c : cases()) {
    torch::manual_seed(1234);
    MoELayer full(c.config);
    full->to(at::kDouble);
    MoELayer sharded(c.config, group);
    sharded->to(at::kDouble);
    {
      at::NoGradGuard no_grad;
      sharded->router->gate_weight.copy_(full->router->gate_weight);
      if (c.config.num_shared_experts > 0) {
        sharded->shared_experts->w_gate_up.copy_(full->shared_experts->w_gate_up);
        sharded->shared_experts->w_down.copy_(full->shared_experts->w_down);
      }
    }
    sharded->load_full_expert_weights(full->experts->w_gate_up, full->experts->w_down);

    // Every rank can build every rank's batch: inputs come from per-rank seeds.
    std::vector<at::Tensor> inputs, out_grads;
    for (int64_t r = 0; r < world; ++r) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + r);
      const int64_t tokens = tokens_of_rank(r, world, c.last_rank_empty);
      inputs.push_back(at::randn({tokens, c.config.hidden_size}, generator, at::kDouble));
      out_grads.push_back(at::randn({tokens, c.config.hidden_size}, generator, at::kDouble));
    }

    // Expert-parallel: this rank's batch.
    at::Tensor x = inputs[rank].clone().requires_grad_(true);
    MoEOutput out = sharded->forward(x);
    ((out.output * out_grads[rank]).sum() + out.aux_loss).backward();

    // Reference: one process with all experts, every rank's batch, one summed loss.
    std::vector<at::Tensor> ref_inputs;
    at::Tensor ref_loss = at::zeros({}, at::kDouble);
    at::Tensor ref_out_mine;
    for (int64_t r = 0; r < world; ++r) {
      ref_inputs.push_back(inputs[r].clone().requires_grad_(true));
      MoEOutput ref = full->forward(ref_inputs[r]);
      if (r == rank) ref_out_mine = ref.output.detach();
      ref_loss = ref_loss + (ref.output * out_grads[r]).sum() + ref.aux_loss;
    }
    ref_loss.backward();

    const int64_t first = sharded->first_local_expert(), local = sharded->num_local_experts();
    double max_diff = 0.0;
    auto note = [&](const char* what, double d) {
      std::cout << "DIFF case=" << c.name << " rank=" << rank << " " << what << "=" << d
                << std::endl;
      max_diff = std::max(max_diff, d);
    };
    note("output", diff(out.output.detach(), ref_out_mine));
    note("grad_input", diff(x.grad(), ref_inputs[rank].grad()));
    note("grad_w_gate_up", diff(sharded->experts->w_gate_up.grad(),
                                full->experts->w_gate_up.grad().narrow(0, first, local)));
    note("grad_w_down", diff(sharded->experts->w_down.grad(),
                             full->experts->w_down.grad().narrow(0, first, local)));
    // Replicated parameters: each rank holds the gradient of its own tokens; summed over ranks
    // (what data parallelism's all-reduce does) it equals the one-process gradient.
    at::Tensor gate_grad = sharded->router->gate_weight.grad().clone();
    all_reduce_sum(gate_grad, group);
    note("grad_gate", diff(gate_grad, full->router->gate_weight.grad()));
    if (c.config.num_shared_experts > 0) {
      at::Tensor shared_grad = sharded->shared_experts->w_down.grad().clone();
      all_reduce_sum(shared_grad, group);
      note("grad_shared", diff(shared_grad, full->shared_experts->w_down.grad()));
    }
    const double magnitude = full->experts->w_gate_up.grad().abs().max().item<double>();
    std::cout << "RESULT case=" << c.name << " rank=" << rank << " max_diff=" << max_diff
              << " grad_magnitude=" << magnitude << std::endl;
  }
  return 0;
}

int run_dead_peer(const ExpertParallelGroup& group) {
  const int64_t rank = group.rank(), world = group.size();
  MoEConfig config = cases()[0].config;
  MoELayer layer(config, group);
  if (rank == world - 1) {
    std::cout << "DEAD_PEER_EXITING rank=" << rank << std::endl;
    std::_Exit(0);  // dies without saying goodbye
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    layer->forward(at::randn({16, config.hidden_size}));
  } catch (const c10::Error& error) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string message = error.what_without_backtrace();
    for (char& ch : message) {
      if (ch == '\n') ch = ' ';
    }
    std::cout << "DEAD_PEER_ERROR rank=" << rank << " seconds=" << seconds << " message=" << message
              << std::endl;
    return 0;
  }
  std::cout << "DEAD_PEER_NO_ERROR rank=" << rank << std::endl;
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr
        << "usage: moe_ep_worker equality|dead_peer|rebalance|memory|rebalance_checkpoint RANK "
           "WORLD PORT TIMEOUT_MS\n";
    return 2;
  }
  const std::string mode = argv[1];
  GlooGroupOptions options;
  options.rank = std::atoi(argv[2]);
  options.world_size = std::atoi(argv[3]);
  options.port = std::atoi(argv[4]);
  options.timeout = std::chrono::milliseconds(std::atoi(argv[5]));
  at::set_num_threads(1);  // several ranks share two cores
  try {
    const ExpertParallelGroup group = connect_gloo_group(options);
    if (mode == "equality") return run_equality(group);
    if (mode == "dead_peer") return run_dead_peer(group);
    if (mode == "rebalance") return run_rebalance(group);
    if (mode == "memory") return run_memory(group);
    if (mode == "rebalance_checkpoint") return run_rebalance_checkpoint(group);
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "moe_ep_worker rank " << options.rank << " failed: " << error.what() << "\n";
    return 1;
  }
}
