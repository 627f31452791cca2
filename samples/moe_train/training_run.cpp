#include "training_run.h"

#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "cold_expert_offload.h"
#include "distributed_setup.h"
#include "moe_transformer.h"
#include "moescope/recorder.h"
#include "moescope/runtime/expert_rebalancer.h"
#include "moescope/runtime/host_tensor_cache.h"
#include "moescope/runtime/memory_accounting.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/trace/rebalance_reason.h"
#include "text_corpus.h"
#include "training_checkpoint.h"

namespace moe_train {
namespace {

using moescope::runtime::ExpertParallelGroup;
using moescope::runtime::MoELayer;

// The AdamW betas of every parameter (the expert offload's too).
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.95;

// Recorder spans around the parts of a step, so a trace shows where the step's time went.
// Interned once; with no recorder active each begin/end is one branch.
struct StepSpanNames {
  moescope_name_t forward = moescope_intern("train.forward");
  moescope_name_t backward = moescope_intern("train.backward");
  moescope_name_t grad_sync = moescope_intern("train.grad_allreduce");
  moescope_name_t optimizer = moescope_intern("train.optimizer");
  moescope_name_t rebalance = moescope_intern("train.rebalance");
  moescope_name_t expert_offload = moescope_intern("train.expert_offload");
};

class ScopedSpan {
 public:
  explicit ScopedSpan(moescope_name_t name) { moescope_span_begin(0, name); }
  ~ScopedSpan() { moescope_span_end(); }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
};

TransformerConfig make_model_config(const TrainOptions& options) {
  TransformerConfig config;
  config.vocab_size = kVocabularySize;
  config.max_seq_len = options.seq_len;
  config.num_layers = options.layers;
  config.hidden_size = options.hidden;
  config.num_heads = options.heads;
  config.gate_skew = options.gate_skew;
  config.skew_layer = options.skew_layer;
  moescope::runtime::MoEConfig& moe = config.moe;
  moe.hidden_size = options.hidden;
  moe.ffn_hidden_size = options.ffn_hidden;
  moe.num_experts = options.experts;
  moe.top_k = options.top_k;
  moe.capacity_factor = options.capacity_factor;
  moe.score_function = options.sigmoid_scores ? moescope::runtime::ScoreFunction::kSigmoid
                                              : moescope::runtime::ScoreFunction::kSoftmax;
  moe.normalize_top_k_weights = options.normalize_top_k;
  moe.num_redundant_experts = options.redundant_experts;
  moe.receive_cap_rows = options.receive_cap;
  moe.use_dispatch_buffer_pool = options.dispatch_pool;
  moe.use_fused_kernels = options.fused_kernels;
  moe.recompute_expert_activation = options.recompute_expert_activation;
  if (options.balance == BalanceMode::kAuxLoss) moe.aux_loss_coeff = options.aux_loss_coeff;
  if (options.balance == BalanceMode::kAuxFree) {
    moe.enable_expert_bias = true;
    moe.expert_bias_update_rate = options.bias_update_rate;
  }
  return config;
}

// Every rank draws the full [E, ...] expert weights from the same seeded stream and keeps its
// slice, so the initial model is the same whatever the world size.
void initialise_experts(MoETransformer& model, const TransformerConfig& config) {
  torch::NoGradGuard no_grad;
  const int64_t experts = config.moe.num_experts, hidden = config.hidden_size,
                ffn = config.moe.ffn_hidden_size;
  for (auto& moe : model->moe_layers()) {
    at::Tensor w_gate_up = at::randn({experts, hidden, 2 * ffn}) * config.moe.init_std;
    at::Tensor w_down = at::randn({experts, ffn, hidden}) * config.moe.init_std;
    moe->load_full_expert_weights(w_gate_up, w_down);
  }
}

// Module::to(dtype) would also cast the integer buffers (token counts): cast only the
// parameters, and keep each router's gate in fp32 as the runtime computes routing in fp32.
void cast_parameters_except_routers(MoETransformer& model, at::ScalarType dtype) {
  if (dtype == at::kFloat) return;
  std::unordered_set<const c10::TensorImpl*> routers;
  for (auto& moe : model->moe_layers()) {
    for (const auto& parameter : moe->router->parameters()) {
      routers.insert(parameter.unsafeGetTensorImpl());
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& parameter : model->parameters()) {
    if (!routers.count(parameter.unsafeGetTensorImpl())) parameter.set_data(parameter.to(dtype));
  }
}

// The step's one gradient all-reduce: averages the gradients of the replicated parameters over
// the ranks (every rank backpropagated loss / world_size, so a sum gives the mean gradient) and
// sums each MoE layer's replicated experts' gradients over their replicas
// (MoELayer::replica_gradient_partial_sums), so replicas cost bytes in it, not a collective each.
void sync_gradients(const std::vector<at::Tensor>& parameters, std::vector<MoELayer> moe_layers,
                    const ExpertParallelGroup& group) {
  if (!group.is_distributed()) return;
  std::vector<at::Tensor> flat;
  for (const auto& parameter : parameters) {
    flat.push_back(parameter.grad().defined()
                       ? parameter.grad().reshape(-1)
                       : at::zeros({parameter.numel()}, parameter.options()));
  }
  std::vector<at::Tensor> replica_sums;
  for (auto& moe : moe_layers) {
    replica_sums.push_back(moe->replica_gradient_partial_sums());
    flat.push_back(replica_sums.back().reshape(-1));
  }
  at::Tensor buffer = moescope::runtime::all_reduce_sum(at::cat(flat), group, "ar.grad_sync");
  int64_t offset = 0;
  for (const auto& parameter : parameters) {
    const int64_t numel = parameter.numel();
    at::Tensor slice = buffer.slice(0, offset, offset + numel).view_as(parameter);
    if (parameter.grad().defined()) {
      parameter.mutable_grad().copy_(slice);
    } else {
      parameter.mutable_grad() = slice.clone();
    }
    offset += numel;
  }
  for (size_t l = 0; l < moe_layers.size(); ++l) {
    const int64_t numel = replica_sums[l].numel();
    moe_layers[l]->take_replica_gradient_sums(
        buffer.slice(0, offset, offset + numel).view(replica_sums[l].sizes()));
    offset += numel;
  }
}

struct StepStatistics {
  double loss = 0.0;  // mean over ranks
  double aux_loss = 0.0;
  std::vector<double> max_over_mean;                   // per layer, global tokens per expert
  std::vector<std::vector<double>> tokens_per_expert;  // [layers][E], summed over the ranks
  int64_t dropped = 0;                                 // summed over ranks
  at::Tensor extra;                                    // the caller's extra sums, summed
  double bytes = 0;                                    // what the all-reduce carried
};

// One small all-reduce of [loss, aux, dropped, tokens per expert of every layer, `extra`] for
// the log (`extra`: more doubles to sum, the rebalancer's step sums; may be undefined).
StepStatistics gather_statistics(const at::Tensor& loss, const at::Tensor& aux_loss,
                                 int64_t dropped, const std::vector<at::Tensor>& tokens,
                                 const at::Tensor& extra, const ExpertParallelGroup& group) {
  const auto double_options = loss.options().dtype(at::kDouble);
  std::vector<at::Tensor> parts{loss.detach().to(at::kDouble).reshape({1}),
                                aux_loss.detach().to(at::kDouble).reshape({1}),
                                at::full({1}, static_cast<double>(dropped), double_options)};
  for (const auto& layer_tokens : tokens) parts.push_back(layer_tokens.to(at::kDouble));
  if (extra.defined()) parts.push_back(extra.to(loss.device(), at::kDouble));
  at::Tensor summed = at::cat(parts);
  if (group.is_distributed())
    summed = moescope::runtime::all_reduce_sum(summed, group, "ar.statistics");
  summed = summed.cpu().contiguous();
  const double world = static_cast<double>(group.size());
  StepStatistics stats;
  if (extra.defined())
    stats.extra = summed.narrow(0, summed.numel() - extra.numel(), extra.numel());
  stats.bytes = static_cast<double>(summed.numel()) * sizeof(double);
  stats.loss = summed[0].item<double>() / world;
  stats.aux_loss = summed[1].item<double>() / world;
  stats.dropped = static_cast<int64_t>(summed[2].item<double>());
  int64_t offset = 3;
  for (const auto& layer_tokens : tokens) {
    const double* first = summed.data_ptr<double>() + offset;  // summed is a contiguous host copy
    const std::vector<double>& counts =
        stats.tokens_per_expert.emplace_back(first, first + layer_tokens.numel());
    const double mean =
        std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(counts.size());
    stats.max_over_mean.push_back(mean > 0 ? *std::max_element(counts.begin(), counts.end()) / mean
                                           : 0.0);
    offset += layer_tokens.numel();
  }
  return stats;
}

void print_expert_load(int rank, int64_t step, const std::vector<at::Tensor>& tokens) {
  for (size_t layer = 0; layer < tokens.size(); ++layer) {
    at::Tensor counts = tokens[layer].to(at::kLong).cpu();
    std::string line = "expert_load rank " + std::to_string(rank) + " step " +
                       std::to_string(step) + " layer " + std::to_string(layer) + " local";
    for (int64_t e = 0; e < counts.numel(); ++e) {
      line += " " + std::to_string(counts[e].item<int64_t>());
    }
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

std::string list_of(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? " " : "") + std::to_string(values[i]);
  return text + "]";
}

void print_offload_report(int64_t step, const LayerOffloadReport& report) {
  std::printf(
      "offload step %lld layer %lld experts offloaded %s prefetched %s on host %s state on host "
      "%.1f KB (%lld bytes) on device %.1f KB\n",
      (long long)step, (long long)report.layer, list_of(report.offloaded).c_str(),
      list_of(report.prefetched).c_str(), list_of(report.on_host).c_str(),
      report.host_state_bytes / 1024.0, (long long)report.host_state_bytes,
      report.device_state_bytes / 1024.0);
  std::fflush(stdout);
}

double mean_of(const std::vector<double>& values, size_t first, size_t count) {
  double sum = 0.0;
  for (size_t i = first; i < first + count; ++i) sum += values[i];
  return count ? sum / static_cast<double>(count) : 0.0;
}

// Bytes per category (expert weights, optimizer state, dispatch buffers, other) as counters;
// with --offload-cold-experts the experts' resident state counts as optimizer state and the
// host-held state as "memory.optimizer_state_offloaded"; the experts' CPU block cache as
// "memory.host_tensor_cache".
void record_memory(const MoETransformer& model, const torch::optim::AdamW& optimizer,
                   const ColdExpertOffload* offload) {
  moescope::runtime::MemorySources sources;
  sources.model = model.get();
  sources.optimizers = {&optimizer};
  for (const auto& moe : model->moe_layers()) {
    sources.dispatch_buffers.push_back(moe->dispatch_buffer_pool());
  }
  if (offload != nullptr) sources.expert_optimizers = offload->expert_optimizers();
  sources.host_tensor_cache = &moescope::runtime::HostTensorCache::experts();
  moescope::runtime::record_memory_breakdown(moescope::runtime::measure_memory(sources));
}

int train(const TrainOptions& options) {
  const LaunchEnvironment env = read_launch_environment();
  const bool is_rank0 = env.rank == 0;
  if (options.threads > 0) at::set_num_threads(options.threads);

  c10::Device device(c10::kCPU);
  if (options.device == "cuda") {
    TORCH_CHECK(torch::cuda::is_available(),
                "moe_train: --device cuda, but no CUDA device is "
                "available to LibTorch");
    TORCH_CHECK(env.local_rank < static_cast<int>(torch::cuda::device_count()),
                "moe_train: LOCAL_RANK=", env.local_rank, " but only ", torch::cuda::device_count(),
                " CUDA devices");
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  }
  const at::ScalarType dtype = options.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;

  const std::string data_path = options.data.empty() ? default_corpus_path() : options.data;
  TextCorpus corpus(data_path, options.seq_len);
  TORCH_CHECK((options.experts + options.redundant_experts) % env.world_size == 0,
              "moe_train: --experts ", options.experts, " + --redundant-experts ",
              options.redundant_experts, " is not divisible by the world size ", env.world_size,
              " (the expert slots are spread over all ranks)");
  ExpertParallelGroup group = connect_expert_parallel_group(env, device);

  const TransformerConfig config = make_model_config(options);
  torch::manual_seed(options.seed);
  MoETransformer model(config, group);
  initialise_experts(model, config);
  model->to(device);
  cast_parameters_except_routers(model, dtype);
  const std::vector<at::Tensor> replicated = model->replicated_parameters();

  // --offload-cold-experts: the routed experts' stacked weights get AdamW with the same
  // settings from an ExpertOptimizerOffload (built after the model reached its device and dtype:
  // it keeps views of the weights), the main AdamW gets everything else.
  std::unique_ptr<ColdExpertOffload> offload;
  if (options.offload_cold_experts) {
    moescope::runtime::ExpertOptimizerOptions expert_options;
    expert_options.kind = moescope::runtime::ExpertOptimizerKind::kAdamW;
    expert_options.lr = options.lr;
    expert_options.beta1 = kAdamBeta1;
    expert_options.beta2 = kAdamBeta2;
    expert_options.eps = torch::optim::AdamWOptions().eps();
    expert_options.weight_decay = options.weight_decay;
    expert_options.cold_load_threshold = options.cold_load_threshold;
    offload = std::make_unique<ColdExpertOffload>(model->moe_layers(), expert_options,
                                                  options.offload_every);
  }
  // Two parameter groups: everything, and the router gates at --router-lr-scale x the rate
  // (0 freezes the routers: the routing then changes only through the tokens' hidden states).
  std::vector<at::Tensor> router_parameters, other_parameters;
  {
    std::unordered_set<const c10::TensorImpl*> routers;
    for (auto& moe : model->moe_layers()) {
      for (const auto& parameter : moe->router->parameters()) {
        routers.insert(parameter.unsafeGetTensorImpl());
      }
    }
    for (const auto& parameter : model->parameters()) {
      if (offload && offload->expert_parameters().count(parameter.unsafeGetTensorImpl())) {
        continue;  // the routed experts' AdamW is the offload's
      }
      (routers.count(parameter.unsafeGetTensorImpl()) ? router_parameters : other_parameters)
          .push_back(parameter);
    }
  }
  auto adamw_options = [&](double lr) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr)
                                                            .weight_decay(options.weight_decay)
                                                            .betas({kAdamBeta1, kAdamBeta2}));
  };
  torch::optim::AdamW optimizer(
      {torch::optim::OptimizerParamGroup(other_parameters, adamw_options(options.lr)),
       torch::optim::OptimizerParamGroup(router_parameters,
                                         adamw_options(options.lr * options.router_lr_scale))},
      torch::optim::AdamWOptions(options.lr));

  std::unique_ptr<moescope::runtime::ExpertRebalancer> rebalancer;
  if (options.rebalance_every > 0) {
    moescope::runtime::RebalancerOptions rebalance;
    rebalance.interval_steps = options.rebalance_every;
    rebalance.warmup_steps = std::min<int64_t>(options.rebalance_every, 10);
    rebalance.imbalance_threshold = options.rebalance_threshold;
    rebalance.replica_gradients_packed = true;  // sync_gradients
    rebalance.plan_for_next_window = options.rebalance_plan == "next-window";
    rebalance.rule = options.rebalance_rule == "imbalance"
                         ? moescope::runtime::RebalanceRule::kImbalanceGain
                         : moescope::runtime::RebalanceRule::kPredictedNetGain;
    rebalancer = std::make_unique<moescope::runtime::ExpertRebalancer>(
        model->moe_layers(), rebalance, std::vector<torch::optim::Optimizer*>{&optimizer});
  }

  const std::string signature = checkpoint_signature(options, env);
  const std::string checkpoint = options.checkpoint.empty()
                                     ? std::string()
                                     : checkpoint_path_for_rank(options.checkpoint, env);
  const CheckpointExtras checkpoint_extras{rebalancer.get(), offload.get()};
  int64_t first_step = 0;
  if (options.resume) {
    first_step =
        load_checkpoint(checkpoint, signature, device, model, optimizer, checkpoint_extras);
  }

  if (is_rank0) {
    std::printf(
        "moe_train: %d rank(s) (%s), %s %s; %lld layers x %lld experts (%lld per rank), top-%lld, "
        "hidden %lld, balance %s, gate skew %.2f on %s\n",
        env.world_size,
        env.world_size == 1 ? "one process"
        : device.is_cuda()  ? "nccl"
                            : "gloo",
        device.str().c_str(), options.dtype.c_str(), (long long)options.layers,
        (long long)options.experts,
        (long long)((options.experts + options.redundant_experts) / env.world_size),
        (long long)options.top_k, (long long)options.hidden, balance_mode_name(options.balance),
        options.gate_skew,
        options.skew_layer < 0 ? "every layer"
                               : ("layer " + std::to_string(options.skew_layer)).c_str());
    std::printf("moe_train: text %zu bytes from %zu file(s) in %s%s\n", corpus.size_bytes(),
                corpus.num_files(), data_path.c_str(),
                first_step > 0 ? (", resumed at step " + std::to_string(first_step)).c_str() : "");
    std::fflush(stdout);
  }

  const StepSpanNames spans;
  const int64_t tokens_per_step = options.batch * options.seq_len * env.world_size;
  std::vector<double> losses;
  for (int64_t step = first_step; step < options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    moescope::runtime::set_training_step(step);
    const double warmup = options.warmup_steps > 0
                              ? std::min(1.0, static_cast<double>(step + 1) / options.warmup_steps)
                              : 1.0;
    optimizer.param_groups()[0].options().set_lr(options.lr * warmup);
    optimizer.param_groups()[1].options().set_lr(options.lr * options.router_lr_scale * warmup);
    if (offload) offload->set_lr(options.lr * warmup);

    at::Tensor window = at::tensor(corpus.batch(options.seed, env.rank, step, options.batch))
                            .view({options.batch, options.seq_len + 1})
                            .to(device);
    at::Tensor inputs = window.slice(1, 0, options.seq_len);
    at::Tensor targets = window.slice(1, 1, options.seq_len + 1);

    LanguageModelOutput out;
    at::Tensor loss;
    {
      ScopedSpan span(spans.forward);
      out = model->forward(inputs);
      loss = at::cross_entropy_loss(out.logits.reshape({-1, kVocabularySize}), targets.reshape(-1));
    }
    {
      ScopedSpan span(spans.backward);
      ((loss + out.aux_loss) / static_cast<double>(env.world_size)).backward();
    }
    {
      ScopedSpan span(spans.grad_sync);
      sync_gradients(replicated, model->moe_layers(), group);
    }
    {
      ScopedSpan span(spans.optimizer);
      optimizer.step();
      optimizer.zero_grad();
      if (offload) {
        offload->step();
        offload->zero_grad();
      }
      if (options.balance == BalanceMode::kAuxFree) {
        for (auto& moe : model->moe_layers()) moe->update_expert_bias();
      }
    }
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
    const double step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    // The rebalancer's loads, step time and cost sums ride on the statistics' all-reduce.
    const at::Tensor rebalancer_sums =
        rebalancer ? rebalancer->local_step_sums(step_ms / 1000.0) : at::Tensor();
    const auto statistics_start = std::chrono::steady_clock::now();
    const StepStatistics stats = gather_statistics(loss, out.aux_loss, out.num_dropped,
                                                   out.tokens_per_expert, rebalancer_sums, group);
    if (rebalancer && device.is_cpu() && group.is_distributed()) {
      // Taken after the optimizer step, when the ranks arrive together: the collective's own
      // time, the fixed cost the replicas' bytes would add to (they add no collective here).
      rebalancer->observe_all_reduce(
          stats.bytes, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                 statistics_start)
                           .count());
    }
    if (rebalancer) {
      ScopedSpan span(spans.rebalance);
      for (const auto& decision : rebalancer->after_summed_step(step, stats.extra)) {
        if (!is_rank0) continue;
        const auto& verdict = decision.verdict;
        std::printf(
            "rebalance step %lld layer %lld predicted max/mean %.2f -> %.2f %s (%lld bytes "
            "received by rank 0, %.1f ms); gain %.3f ms/step, replica sync %.3f ms/step, "
            "migration %.3f ms / %.0f steps, net %.3f +- %.3f ms/step: %s\n",
            (long long)step, (long long)decision.layer, decision.imbalance_before,
            decision.imbalance_after, decision.applied ? "applied" : "kept the placement",
            (long long)decision.change.migration.bytes_received, decision.change.seconds * 1e3,
            verdict.gain_ms, verdict.replica_sync_ms, verdict.migration_ms, verdict.window_steps,
            verdict.net_ms, 1.96 * verdict.net_stderr_ms,
            moescope::trace::rebalance_reason_text(static_cast<uint32_t>(verdict.reason)));
      }
    }
    bool offload_changed = false;
    if (offload) {
      ScopedSpan span(spans.expert_offload);
      for (const LayerOffloadReport& report : offload->after_step(step, stats.tokens_per_expert)) {
        offload_changed = true;
        if (is_rank0) print_offload_report(step, report);
      }
    }
    if (moescope_recording && (step % 10 == 0 || offload_changed)) {
      record_memory(model, optimizer, offload.get());
    }
    losses.push_back(stats.loss);
    if (options.print_expert_load) print_expert_load(env.rank, step, out.tokens_per_expert);
    if (is_rank0 && (step % options.log_every == 0 || step + 1 == options.steps)) {
      std::string balance;
      for (size_t layer = 0; layer < stats.max_over_mean.size(); ++layer) {
        char part[32];
        std::snprintf(part, sizeof(part), " L%zu %.2f", layer, stats.max_over_mean[layer]);
        balance += part;
      }
      std::printf("step %lld loss %.6f aux %.6f max/mean%s dropped %lld step_ms %.2f tok/s %.0f\n",
                  (long long)step, stats.loss, stats.aux_loss, balance.c_str(),
                  (long long)stats.dropped, step_ms, tokens_per_step / (step_ms / 1000.0));
      std::fflush(stdout);
    }
    if (!checkpoint.empty() && options.checkpoint_every > 0 &&
        (step + 1) % options.checkpoint_every == 0 && step + 1 < options.steps) {
      save_checkpoint(checkpoint, step + 1, signature, model, optimizer, checkpoint_extras);
    }
  }
  if (!checkpoint.empty()) {
    save_checkpoint(checkpoint, std::max(first_step, options.steps), signature, model, optimizer,
                    checkpoint_extras);
    if (is_rank0) std::printf("moe_train: checkpoint saved to %s\n", options.checkpoint.c_str());
  }
  if (is_rank0 && !losses.empty()) {
    const size_t window = std::min<size_t>(5, losses.size());
    std::printf("moe_train: loss %.4f -> %.4f (mean of the first/last %zu steps of this run)\n",
                mean_of(losses, 0, window), mean_of(losses, losses.size() - window, window),
                window);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int run_training(const TrainOptions& options) {
  try {
    return train(options);
  } catch (const c10::Error& error) {
    std::fprintf(stderr, "moe_train: error: %s\n", error.what_without_backtrace());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "moe_train: error: %s\n", error.what());
  }
  return 1;
}

}  // namespace moe_train
