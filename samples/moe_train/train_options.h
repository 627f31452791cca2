// Command-line options of moe_train and their checks. Torch-free, so parsing stays cheap to
// compile and can fail with a clear message before LibTorch starts.
#pragma once

#include <cstdint>
#include <string>

namespace moe_train {

enum class BalanceMode {
  kNone,     // the router learns alone
  kAuxLoss,  // Switch/GShard auxiliary loss added to the task loss
  kAuxFree,  // DeepSeek-V3 aux-loss-free expert bias, updated after every optimizer step
};

const char* balance_mode_name(BalanceMode mode);

struct TrainOptions {
  // ---- run length and data ----
  int64_t steps = 100;  // train until this step (a resumed run continues up to it)
  int64_t batch = 16;   // sequences per rank and step
  int64_t seq_len = 64;
  std::string data;  // a *.txt file or a folder of them; default: the shipped texts
  uint64_t seed = 1234;

  // ---- model ----
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t ffn_hidden = 128;  // per expert
  int64_t experts = 8;
  int64_t top_k = 2;
  double capacity_factor = 0.0;  // <= 0: dropless

  // ---- routing / balancing ----
  BalanceMode balance = BalanceMode::kNone;
  double aux_loss_coeff = 1e-2;        // --balance aux
  double bias_update_rate = 1e-3;      // --balance aux-free
  bool sigmoid_scores = false;         // --score-function sigmoid (DeepSeek-V3) instead of softmax
  bool normalize_top_k = true;         // combine weights of the chosen experts sum to 1 (Mixtral)
  double gate_skew = 0.0;              // logit skew strength (expert 0 gets +S, the last 0)
  int64_t skew_layer = -1;             // layer that gets the skew; -1 = every layer
  int64_t redundant_experts = 0;       // extra expert slots (all ranks) for replicas of hot experts
  int64_t rebalance_every = 0;         // consider a new expert placement every N steps; 0 = never
  double rebalance_threshold = 1.1;    // predicted max/mean per-rank load that triggers one
  std::string rebalance_rule = "net";  // net (the cost rule) or imbalance (the earlier rule)
  std::string rebalance_plan =
      "next-window";  // next-window (over the forecast's errors) or forecast

  // ---- memory ----
  int64_t receive_cap = 0;     // rows a rank's experts accept per forward; 0 = no cap
  bool dispatch_pool = false;  // all-to-all buffers from a pool sized from the load
  // The routed experts' AdamW state in ExpertOptimizerOffload: experts predicted to receive
  // fewer than cold_load_threshold tokens per step keep their state in host memory.
  bool offload_cold_experts = false;
  double cold_load_threshold = 1.0;  // predicted tokens per step (all ranks) of one expert
  int64_t offload_every = 10;        // re-decide which experts are cold every N steps

  // ---- optimisation ----
  double lr = 3e-3;
  double router_lr_scale = 1.0;  // the router gates learn at lr * this
  double weight_decay = 0.01;
  int64_t warmup_steps = 10;

  // ---- execution ----
  std::string device = "cpu";     // cpu | cuda (cuda:LOCAL_RANK under a launcher)
  std::string dtype = "float32";  // float32 | bfloat16
  int threads = 0;                // intra-op threads; 0 = LibTorch's default (OMP_NUM_THREADS)
  bool fused_kernels = true;      // MoEConfig::use_fused_kernels (CUDA only)
  bool recompute_expert_activation = false;  // MoEConfig::recompute_expert_activation
  // Fixed glibc mmap/trim thresholds (like running under tcmalloc): with glibc's dynamic ones
  // every CPU step re-faults megabytes of tensor memory that was handed back to the system.
  bool malloc_tuning = true;

  // ---- checkpoints and output ----
  std::string checkpoint;          // save here (per rank: PATH.rankN when world size > 1)
  int64_t checkpoint_every = 0;    // also save every N steps; 0 = only at the end
  bool resume = false;             // load --checkpoint first and continue from its step
  bool print_expert_load = false;  // each rank prints its tokens per expert per layer and step
  int64_t log_every = 1;           // loss lines every N steps (rank 0)
};

/// Parses argv. On --help prints usage and returns false with exit_code 0; on a bad option or
/// value prints what was wrong and returns false with exit_code 2.
bool parse_train_options(int argc, char** argv, TrainOptions& options, int& exit_code);

/// Checks value ranges and combinations; returns an empty string or the message naming the
/// bad option.
std::string check_train_options(const TrainOptions& options);

}  // namespace moe_train
