#include "moescope/runtime/trace_statistics_queue.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moescope/recorder.h"
#include "moescope/runtime/moe_instrumentation.h"

namespace moescope::runtime {
namespace {

float max_over_mean(const std::vector<int64_t>& counts) {
  if (counts.empty()) return NAN;
  const double total =
      static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  if (total <= 0) return NAN;
  const double max = static_cast<double>(*std::max_element(counts.begin(), counts.end()));
  return static_cast<float>(max / (total / static_cast<double>(counts.size())));
}

void write_expert_bias(int64_t step, int64_t layer, int64_t rank, const std::vector<float>& bias) {
  moescope_expert_values(step, static_cast<uint32_t>(layer), static_cast<int32_t>(rank),
                         MOESCOPE_QUANTITY_ROUTER_BIAS, bias.data(),
                         static_cast<uint32_t>(bias.size()));
}

}  // namespace

bool TraceStatisticsQueue::skipped_for_graph_capture(const at::Tensor& on_device) {
  if (!HostCopyInFlight::capturing_cuda_graph(on_device)) return false;
  // The step being captured runs later as graph replays, which no host code sees; the layer's
  // own computation is captured unchanged.
  TORCH_WARN_ONCE(
      "moescope: MoE statistics of steps captured into a CUDA graph are not "
      "recorded (no host copy can be made during capture; replays run no host code)");
  return true;
}

TraceStatisticsQueue::~TraceStatisticsQueue() {
  try {
    drain();
  } catch (const std::exception& error) {
    TORCH_WARN("moescope: trace statistics of a destroyed MoE layer were lost: ", error.what());
  }
}

void TraceStatisticsQueue::record_layer_step(const LayerStepReport& report) {
  if (is_trace_recording() && !skipped_for_graph_capture(report.statistics.tokens_per_expert)) {
    at::NoGradGuard no_grad;
    const LayerStatisticsInputs& inputs = report.statistics;
    const StatisticsArithmetic arithmetic =
        arithmetic_.value_or(default_statistics_arithmetic(inputs.tokens_per_expert.device()));
    pending_.push_back(Pending{
        .kind = Pending::Kind::kLayerStep,
        .step = current_training_step(),
        .layer = report.layer,
        .rank = report.rank,
        .num_experts = inputs.tokens_per_expert.size(0),
        .copy = HostCopyInFlight(pack_layer_statistics(inputs, arithmetic)),
        .received_tokens_per_expert = report.received_tokens_per_expert,
        .num_dropped = report.num_dropped,
        .has_tokens = inputs.scores.defined() && inputs.scores.size(0) > 0,
        .global_scope = report.global_scope,
    });
  }
  poll();
}

void TraceStatisticsQueue::record_expert_bias(int64_t layer, int64_t rank,
                                              const at::Tensor& expert_bias) {
  if (is_trace_recording() && !skipped_for_graph_capture(expert_bias)) {
    at::NoGradGuard no_grad;
    pending_.push_back(Pending{
        .kind = Pending::Kind::kExpertBias,
        .step = current_training_step(),
        .layer = layer,
        .rank = rank,
        .num_experts = expert_bias.numel(),
        .copy = HostCopyInFlight(expert_bias.to(at::kFloat)),
        .received_tokens_per_expert = {},
        .num_dropped = 0,
        .has_tokens = false,
        .global_scope = false,
    });
  }
  poll();
}

bool TraceStatisticsQueue::has_landed(const Pending& pending) const {
  return current_training_step() >= pending.step + simulated_latency_steps_ &&
         pending.copy.is_ready();
}

void TraceStatisticsQueue::poll() {
  // Copies complete in stream order: the first one still in flight holds back the rest, so the
  // trace gets them in the order they were queued.
  while (!pending_.empty() && has_landed(pending_.front())) {
    if (is_trace_recording()) write(pending_.front());
    pending_.pop_front();
  }
}

void TraceStatisticsQueue::drain() {
  while (!pending_.empty()) {
    pending_.front().copy.wait();
    if (is_trace_recording()) write(pending_.front());
    pending_.pop_front();
  }
}

void TraceStatisticsQueue::write(const Pending& pending) const {
  if (pending.kind == Pending::Kind::kExpertBias) {
    const at::Tensor& bias = pending.copy.host();
    write_expert_bias(pending.step, pending.layer, pending.rank,
                      std::vector<float>(bias.const_data_ptr<float>(),
                                         bias.const_data_ptr<float>() + bias.numel()));
    return;
  }
  const LayerStatistics statistics =
      unpack_layer_statistics(pending.copy.host(), pending.num_experts);
  const int64_t step = pending.step;
  const auto layer = static_cast<uint32_t>(pending.layer);
  const auto rank = static_cast<int32_t>(pending.rank);
  const std::vector<int64_t>& local = statistics.tokens_per_expert;
  const auto dropped = static_cast<uint64_t>(pending.num_dropped);
  moescope_expert_load(step, layer, rank, MOESCOPE_EXPERTS_LOCAL, local.data(),
                       static_cast<uint32_t>(local.size()), dropped);
  if (pending.global_scope) {
    moescope_expert_load(step, layer, rank, MOESCOPE_EXPERTS_GLOBAL, local.data(),
                         static_cast<uint32_t>(local.size()), dropped);
  }
  const std::vector<int64_t>& received = pending.received_tokens_per_expert;
  if (!received.empty()) {
    moescope_expert_load(step, layer, rank, MOESCOPE_EXPERTS_RECEIVED, received.data(),
                         static_cast<uint32_t>(received.size()), 0);
  }

  moescope_layer_stats stats{};
  stats.step = step;
  stats.layer = layer;
  stats.rank = rank;
  stats.aux_loss = statistics.aux_loss;
  stats.z_loss = statistics.z_loss;
  stats.router_entropy = pending.has_tokens ? statistics.entropy : NAN;
  stats.max_over_mean = max_over_mean(local);
  stats.nonfinite_logits = statistics.nonfinite_logits;
  stats.nonfinite_outputs = statistics.nonfinite_outputs;
  moescope_layer_stats_record(&stats);
  if (stats.nonfinite_logits > 0 || stats.nonfinite_outputs > 0) {
    // Interned per use: ids belong to one recording, and a recorder may restart.
    moescope_instant(moescope_intern("moescope"), moescope_intern("moe.nonfinite"));
  }
  if (pending.has_tokens) {
    moescope_expert_values(step, layer, rank, MOESCOPE_QUANTITY_MEAN_PROB,
                           statistics.mean_score.data(),
                           static_cast<uint32_t>(statistics.mean_score.size()));
  }
  if (!statistics.expert_bias.empty()) {
    write_expert_bias(step, pending.layer, pending.rank, statistics.expert_bias);
  }
}

}  // namespace moescope::runtime
