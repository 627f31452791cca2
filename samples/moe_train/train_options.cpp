#include "train_options.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

namespace moe_train {

namespace {

// In BalanceMode order: the name of each mode, and what --balance accepts.
constexpr const char* kBalanceModeNames[] = {"none", "aux", "aux-free"};
constexpr int kNumBalanceModes = 3;
static_assert(sizeof(kBalanceModeNames) / sizeof(kBalanceModeNames[0]) == kNumBalanceModes);

}  // namespace

const char* balance_mode_name(BalanceMode mode) {
  const int index = static_cast<int>(mode);
  return index >= 0 && index < kNumBalanceModes ? kBalanceModeNames[index] : "?";
}

bool parse_train_options(int argc, char** argv, TrainOptions& options, int& exit_code) {
  CLI::App app{
      "moe_train: a small Mixture-of-Experts transformer language model (byte-level) trained on "
      "shipped text with moescope::runtime::MoELayer. Under torchrun (RANK/WORLD_SIZE/"
      "MASTER_ADDR/MASTER_PORT) the experts are spread over all ranks (Gloo on CPU, NCCL on "
      "CUDA)."};
  // A repeated option takes its last value, so scripts can override their defaults.
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);

  app.add_option("--steps", options.steps, "Train until this step")->check(CLI::PositiveNumber);
  app.add_option("--batch", options.batch, "Sequences per rank and step")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq-len", options.seq_len, "Tokens (bytes) per sequence")
      ->check(CLI::PositiveNumber);
  app.add_option("--data", options.data,
                 "A .txt file or a folder of .txt files (default: the shipped texts)");
  app.add_option("--seed", options.seed, "Seed of the initialisation and of the batch order");

  app.add_option("--layers", options.layers, "Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--hidden", options.hidden, "Model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", options.heads, "Attention heads")->check(CLI::PositiveNumber);
  app.add_option("--ffn-hidden", options.ffn_hidden, "SwiGLU width of each expert")
      ->check(CLI::PositiveNumber);
  app.add_option("--experts", options.experts, "Routed experts per layer (all ranks together)")
      ->check(CLI::PositiveNumber);
  app.add_option("--top-k", options.top_k, "Experts per token")->check(CLI::PositiveNumber);
  app.add_option("--capacity-factor", options.capacity_factor,
                 "Expert capacity factor; <= 0 is dropless");

  std::map<std::string, BalanceMode> balance_names;
  for (int mode = 0; mode < kNumBalanceModes; ++mode) {
    balance_names.emplace(kBalanceModeNames[mode], static_cast<BalanceMode>(mode));
  }
  app.add_option("--balance", options.balance, "Load balancing: none | aux | aux-free")
      ->transform(CLI::CheckedTransformer(balance_names, CLI::ignore_case));
  app.add_option("--aux-loss-coeff", options.aux_loss_coeff, "Coefficient of --balance aux")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bias-update-rate", options.bias_update_rate, "Bias step of --balance aux-free")
      ->check(CLI::NonNegativeNumber);
  const std::map<std::string, bool> score_names{{"softmax", false}, {"sigmoid", true}};
  app.add_option("--score-function", options.sigmoid_scores, "Router scores: softmax | sigmoid")
      ->transform(CLI::CheckedTransformer(score_names, CLI::ignore_case));
  app.add_flag("--normalize-top-k,!--no-normalize-top-k", options.normalize_top_k,
               "Scale the chosen experts' weights to sum to 1 (default on)");
  app.add_option("--gate-skew", options.gate_skew,
                 "Router logit skew strength S (expert 0 gets +S, decreasing linearly to 0)");
  app.add_option("--skew-layer", options.skew_layer, "Layer that gets --gate-skew; -1 = all");

  app.add_option("--redundant-experts", options.redundant_experts,
                 "Extra expert slots over all ranks, for replicas of hot experts")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rebalance-every", options.rebalance_every,
                 "Predict expert load and move/replicate experts every N steps; 0 = never")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rebalance-threshold", options.rebalance_threshold,
                 "Predicted max/mean per-rank load above which a new placement is considered")
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--rebalance-rule", options.rebalance_rule,
                 "How a planned placement is judged: net = the predicted step time saved over "
                 "the window beats the replicas' gradient sync and the move's cost (measured by "
                 "the runtime); imbalance = the earlier rule (imbalance ratio x step time vs "
                 "bytes / 10 GB/s)")
      ->check(CLI::IsMember({"net", "imbalance"}));
  app.add_option("--rebalance-plan", options.rebalance_plan,
                 "What a placement is planned for: next-window = weighed over the load forecast "
                 "and the forecast plus each of its last window errors; forecast = the forecast "
                 "alone")
      ->check(CLI::IsMember({"next-window", "forecast"}));
  app.add_option("--receive-cap", options.receive_cap,
                 "Rows a rank's experts accept per forward (cold-start guard); 0 = no cap")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--dispatch-pool", options.dispatch_pool,
               "Take the all-to-all buffers from a pool sized from the load (no steady-state "
               "allocation)");
  app.add_flag("--offload-cold-experts", options.offload_cold_experts,
               "Keep the AdamW state of experts predicted cold in host memory "
               "(ExpertOptimizerOffload), prefetch it when they are predicted hot");
  app.add_option("--cold-load-threshold", options.cold_load_threshold,
                 "Predicted tokens per step (all ranks) below which an expert is cold")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--offload-every", options.offload_every,
                 "Re-decide which experts are cold every N steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", options.lr, "AdamW learning rate")->check(CLI::PositiveNumber);
  app.add_option("--router-lr-scale", options.router_lr_scale,
                 "Learning rate of the router gates relative to --lr")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", options.weight_decay, "AdamW weight decay")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", options.warmup_steps, "Linear learning-rate warmup")
      ->check(CLI::NonNegativeNumber);

  app.add_option("--device", options.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", options.dtype, "float32 | bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--threads", options.threads, "Intra-op threads; 0 = LibTorch's default")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--fused-kernels,!--no-fused-kernels", options.fused_kernels,
               "On CUDA, use moescope's fused kernels where they apply (default on)");
  app.add_flag("--recompute-expert-activation", options.recompute_expert_activation,
               "Recompute the experts' SwiGLU activation in backward instead of keeping it "
               "(2 x rows x ffn fewer elements alive per layer; a little slower)");
  app.add_flag("--malloc-tuning,!--no-malloc-tuning", options.malloc_tuning,
               "Fix glibc's mmap/trim thresholds so CPU steps do not re-fault freed tensor "
               "memory (default on)");

  app.add_option("--checkpoint", options.checkpoint,
                 "Checkpoint file (per rank PATH.rankN when the world size is > 1)");
  app.add_option("--checkpoint-every", options.checkpoint_every,
                 "Also save every N steps (0 = only at the end)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", options.resume, "Load --checkpoint and continue from its step");
  app.add_flag("--print-expert-load", options.print_expert_load,
               "Every rank prints its tokens per expert for each layer and step");
  app.add_option("--log-every", options.log_every, "Print the loss every N steps")
      ->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    exit_code = app.exit(error);
    if (exit_code != 0) exit_code = 2;
    return false;
  }
  if (std::string problem = check_train_options(options); !problem.empty()) {
    std::fprintf(stderr, "moe_train: %s\n", problem.c_str());
    exit_code = 2;
    return false;
  }
  exit_code = 0;
  return true;
}

std::string check_train_options(const TrainOptions& options) {
  if (options.top_k > options.experts) {
    return "--top-k " + std::to_string(options.top_k) + " is larger than --experts " +
           std::to_string(options.experts);
  }
  if (options.hidden % options.heads != 0) {
    return "--hidden " + std::to_string(options.hidden) + " is not divisible by --heads " +
           std::to_string(options.heads);
  }
  if (options.skew_layer < -1 || options.skew_layer >= options.layers) {
    return "--skew-layer " + std::to_string(options.skew_layer) + " is not -1 or a layer in [0, " +
           std::to_string(options.layers) + ")";
  }
  if (options.resume && options.checkpoint.empty()) return "--resume needs --checkpoint PATH";
  if (options.offload_cold_experts && options.rebalance_every > 0) {
    return "--offload-cold-experts with --rebalance-every is not supported (the rebalancer "
           "migrates experts and their AdamW state, the offload keeps that state itself)";
  }
  if (options.offload_cold_experts && options.redundant_experts > 0) {
    return "--offload-cold-experts with --redundant-experts is not supported (the load "
           "forecast is per expert, the offload per slot: replica slots have no forecast)";
  }
  if (options.checkpoint_every > 0 && options.checkpoint.empty()) {
    return "--checkpoint-every needs --checkpoint PATH";
  }
  return {};
}

}  // namespace moe_train
