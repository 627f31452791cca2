// Recording a trace makes a MoELayer step wait for the device no more often than a plain step:
// blocking device-to-host transfers are counted through host_transfers.h (a CPU tensor counts
// like a device one), and the statistics that reach the trace, read back with the trace reader,
// equal the ones computed synchronously from the same step, written at most one step late.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "moescope/recorder.h"
#include "moescope/runtime/host_transfers.h"
#include "moescope/runtime/layer_statistics.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/trace/trace_reader.h"

namespace moescope::runtime {
namespace {

constexpr int64_t kTokens = 48, kHidden = 16, kExperts = 8, kTopK = 2;

MoEConfig layer_config(int64_t layer_index) {
  MoEConfig config;
  config.hidden_size = kHidden;
  config.ffn_hidden_size = 24;
  config.num_experts = kExperts;
  config.top_k = kTopK;
  config.init_std = 0.3;
  config.layer_index = layer_index;
  return config;
}

// Layer 4: every statistic (balancing losses, expert bias, capacity drops). Layer 6: NaN input is
// let through (kDontCheck) and counted.
constexpr int64_t kFullLayer = 4, kNanLayer = 6;

MoEConfig full_config() {
  MoEConfig config = layer_config(kFullLayer);
  config.aux_loss_coeff = 0.01;
  config.z_loss_coeff = 0.001;
  config.enable_expert_bias = true;
  config.expert_bias_update_rate = 0.05;
  config.capacity_factor = 0.75;
  return config;
}

MoEConfig nan_config() {
  MoEConfig config = layer_config(kNanLayer);
  config.nonfinite_policy = NonFinitePolicy::kDontCheck;
  return config;
}

// What the trace must hold for one layer and step, computed synchronously on the host.
struct Expected {
  std::vector<int64_t> tokens_per_expert;
  int64_t num_dropped = 0;
  int64_t num_received_rows = 0;
  float aux_loss = NAN, z_loss = NAN;
  RouterStatistics router;
  uint32_t nonfinite_logits = 0, nonfinite_outputs = 0;
  std::vector<std::vector<float>> expert_bias;  // at the forward, then after the update
};

std::vector<float> to_floats(const at::Tensor& tensor) {
  const at::Tensor host = tensor.detach().to(at::kFloat).contiguous();
  return std::vector<float>(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
}

float scalar_or_nan(const at::Tensor& tensor) {
  return tensor.defined() ? tensor.item<float>() : NAN;
}

uint64_t blocking_transfers() {
  return host_transfer_counts().blocking;
}

// One forward of `layer` at the current step, with the values today's synchronous
// instrumentation computed from the same tensors. Adds the forward's blocking transfers (only
// its own: the reference reads tensors too) to `blocking`.
Expected forward_and_expect(MoELayer& layer, const at::Tensor& input, uint64_t& blocking) {
  Expected expected;
  const RoutingResult routing = layer->router->forward(input);  // what the forward will route
  expected.router = router_statistics(routing.scores);
  expected.nonfinite_logits = count_nonfinite(routing.logits);
  if (layer->config().enable_expert_bias) {
    expected.expert_bias.push_back(to_floats(layer->router->expert_bias));
  }
  const uint64_t before = blocking_transfers();
  const MoEOutput out = layer->forward(input);
  blocking += blocking_transfers() - before;
  const at::Tensor counts = out.tokens_per_expert.contiguous();
  expected.tokens_per_expert.assign(counts.data_ptr<int64_t>(),
                                    counts.data_ptr<int64_t>() + counts.numel());
  expected.num_dropped = out.num_dropped;
  expected.num_received_rows = out.num_received_rows;
  expected.aux_loss = scalar_or_nan(out.losses.aux_loss);
  expected.z_loss = scalar_or_nan(out.losses.z_loss);
  return expected;
}

struct Written {
  int64_t after_step_marker = -1;  // the last moescope_step before the record
};
struct WrittenLoad : Written {
  trace::ExpertLoadRecord record;
  std::vector<uint32_t> counts;
};
struct WrittenValues : Written {
  trace::ExpertValuesRecord record;
  std::vector<float> values;
};
struct WrittenStats : Written {
  trace::LayerStatsRecord record;
};
struct WrittenTrace {
  std::vector<WrittenLoad> loads;
  std::vector<WrittenValues> values;
  std::vector<WrittenStats> stats;
};

WrittenTrace read_trace(const std::string& path) {
  WrittenTrace written;
  trace::TraceReader reader;
  EXPECT_TRUE(reader.open(path)) << path;
  int64_t marker = -1;
  trace::Chunk chunk;
  while (reader.next_chunk(chunk)) {
    for (const trace::RecordView record : chunk) {
      switch (record.kind()) {
        case trace::RecordKind::kStep:
          marker = record.as<trace::StepRecord>().step;
          break;
        case trace::RecordKind::kExpertLoad: {
          WrittenLoad load{{marker}, record.as<trace::ExpertLoadRecord>(), {}};
          load.counts.resize(load.record.num_experts);
          std::memcpy(load.counts.data(), record.tail<trace::ExpertLoadRecord>(),
                      load.counts.size() * sizeof(uint32_t));
          written.loads.push_back(load);
          break;
        }
        case trace::RecordKind::kExpertValues: {
          WrittenValues values{{marker}, record.as<trace::ExpertValuesRecord>(), {}};
          values.values.resize(values.record.num_experts);
          std::memcpy(values.values.data(), record.tail<trace::ExpertValuesRecord>(),
                      values.values.size() * sizeof(float));
          written.values.push_back(values);
          break;
        }
        case trace::RecordKind::kLayerStats:
          written.stats.push_back({{marker}, record.as<trace::LayerStatsRecord>()});
          break;
        default:
          break;
      }
    }
  }
  EXPECT_TRUE(reader.errors().empty());
  return written;
}

// a == b, or both NaN (a NaN input makes the entropy and mean scores NaN on both sides).
void expect_same(float written, float expected, double tolerance, const std::string& what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(written)) << what << ": " << written;
  } else {
    EXPECT_NEAR(written, expected, tolerance * std::max(1.0f, std::abs(expected))) << what;
  }
}

float max_over_mean(const std::vector<int64_t>& counts) {
  int64_t total = 0, max = 0;
  for (int64_t count : counts) {
    total += count;
    max = std::max(max, count);
  }
  return static_cast<float>(static_cast<double>(max) /
                            (static_cast<double>(total) / static_cast<double>(counts.size())));
}

// The device arithmetic (tensor ops) against the host loops, on the same CPU tensors.
LayerStatistics unpacked(const LayerStatisticsInputs& inputs, StatisticsArithmetic arithmetic) {
  const at::Tensor packed = pack_layer_statistics(inputs, arithmetic);
  EXPECT_EQ(packed.scalar_type(), at::kDouble);
  return unpack_layer_statistics(packed, inputs.tokens_per_expert.size(0));
}

void expect_same_statistics(const LayerStatistics& ops, const LayerStatistics& loops,
                            const std::string& what) {
  EXPECT_EQ(ops.tokens_per_expert, loops.tokens_per_expert) << what;
  expect_same(ops.entropy, loops.entropy, 1e-6, what + " entropy");
  ASSERT_EQ(ops.mean_score.size(), loops.mean_score.size()) << what;
  for (size_t e = 0; e < ops.mean_score.size(); ++e) {
    expect_same(ops.mean_score[e], loops.mean_score[e], 1e-6, what + " mean score");
  }
  expect_same(ops.aux_loss, loops.aux_loss, 0.0, what + " aux_loss");
  expect_same(ops.z_loss, loops.z_loss, 0.0, what + " z_loss");
  EXPECT_EQ(ops.nonfinite_logits, loops.nonfinite_logits) << what;
  EXPECT_EQ(ops.nonfinite_outputs, loops.nonfinite_outputs) << what;
  EXPECT_EQ(ops.expert_bias, loops.expert_bias) << what;
}

TEST(LayerStatisticsArithmetic, TensorOpsGiveTheHostLoopsValues) {
  at::manual_seed(11);
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  LayerStatisticsInputs inputs;
  inputs.tokens_per_expert = at::randint(0, 50, {6}, at::kLong);
  inputs.scores = at::rand({37, 6}) + 1e-3;
  inputs.logits = at::randn({37, 6});
  inputs.logits[4][2] = kNan;
  inputs.logits[9][0] = -kInf;
  inputs.expert_output = at::randn({20, 5});
  inputs.expert_output[3][1] = kInf;
  inputs.expert_output = inputs.expert_output.to(at::kBFloat16);  // the reduction path
  inputs.aux_loss = at::scalar_tensor(0.25, at::kFloat);
  inputs.expert_bias = at::randn({6});

  const LayerStatistics loops = unpacked(inputs, StatisticsArithmetic::kHostLoops);
  // The host loops themselves: the inputs as they are, and the torch formula of the entropy.
  const at::Tensor probs = inputs.scores / inputs.scores.sum(-1, true);
  EXPECT_NEAR(loops.entropy, -(probs * probs.log()).sum(-1).mean().item<double>(), 1e-6);
  EXPECT_EQ(loops.tokens_per_expert,
            std::vector<int64_t>(inputs.tokens_per_expert.data_ptr<int64_t>(),
                                 inputs.tokens_per_expert.data_ptr<int64_t>() + 6));
  EXPECT_EQ(loops.nonfinite_logits, 2u);
  EXPECT_EQ(loops.nonfinite_outputs, 1u);
  EXPECT_EQ(loops.aux_loss, 0.25f);
  EXPECT_TRUE(std::isnan(loops.z_loss));
  EXPECT_EQ(loops.expert_bias, to_floats(inputs.expert_bias));
  expect_same_statistics(unpacked(inputs, StatisticsArithmetic::kTensorOps), loops, "full");

  LayerStatisticsInputs other = inputs;
  other.scores = inputs.scores.to(at::kDouble).t().contiguous().t();  // fp64, strided
  other.expert_bias = at::Tensor();
  other.z_loss = at::scalar_tensor(1.5, at::kDouble);
  other.logits = at::Tensor();
  const LayerStatistics other_loops = unpacked(other, StatisticsArithmetic::kHostLoops);
  EXPECT_TRUE(other_loops.expert_bias.empty());
  EXPECT_EQ(other_loops.nonfinite_logits, 0u);
  expect_same_statistics(unpacked(other, StatisticsArithmetic::kTensorOps), other_loops,
                         "fp64 scores, no bias");

  for (const at::Tensor& no_tokens : {at::Tensor(), at::zeros({0, 6})}) {
    LayerStatisticsInputs empty = inputs;
    empty.scores = no_tokens;
    const LayerStatistics empty_loops = unpacked(empty, StatisticsArithmetic::kHostLoops);
    EXPECT_TRUE(std::isnan(empty_loops.entropy));
    expect_same_statistics(unpacked(empty, StatisticsArithmetic::kTensorOps), empty_loops,
                           "no tokens");
  }

  LayerStatisticsInputs bad = inputs;
  bad.expert_bias = at::zeros({5});
  EXPECT_THROW(pack_layer_statistics(bad, StatisticsArithmetic::kTensorOps), c10::Error);
  bad = inputs;
  bad.scores = at::zeros({4, 7});
  EXPECT_THROW(pack_layer_statistics(bad, StatisticsArithmetic::kHostLoops), c10::Error);
  EXPECT_THROW(pack_layer_statistics({}, StatisticsArithmetic::kHostLoops), c10::Error);
  EXPECT_THROW(unpack_layer_statistics(at::zeros({16}, at::kDouble), 6), c10::Error);
  EXPECT_THROW(unpack_layer_statistics(at::zeros({17}, at::kFloat), 6), c10::Error);
}

TEST(HostTransfers, CountBlockingReadsAndSnapshotInFlightCopies) {
  const at::Tensor values = at::arange(5, at::kLong);
  const HostTransferCounts before = host_transfer_counts();
  EXPECT_EQ(copy_to_host_int64(values), std::vector<int64_t>({0, 1, 2, 3, 4}));
  EXPECT_EQ(read_scalar(values[3]).to<int64_t>(), 3);
  EXPECT_EQ(host_transfer_counts().blocking - before.blocking, 2u);

  at::Tensor source = at::ones({3}, at::kFloat);
  const HostCopyInFlight copy(source.t());
  source.fill_(7.0f);  // later work on the source does not reach the copy
  EXPECT_TRUE(copy.is_ready());
  copy.wait();
  EXPECT_TRUE(copy.host().equal(at::ones({3}, at::kFloat)));
  EXPECT_EQ(host_transfer_counts().non_blocking - before.non_blocking, 1u);
  EXPECT_EQ(host_transfer_counts().blocking - before.blocking, 2u);  // ready: wait() did not wait
}

using Arithmetic = std::optional<StatisticsArithmetic>;

class RecordingWithoutHostSync : public ::testing::TestWithParam<std::tuple<Arithmetic, int>> {};

TEST_P(RecordingWithoutHostSync, RecordedStepsBlockAsOftenAsPlainOnesAndTraceTheSyncValues) {
  const auto [arithmetic, latency_steps] = GetParam();
  torch::manual_seed(3);
  MoELayer full(full_config());
  MoELayer with_nan(nan_config());
  for (MoELayer* layer : {&full, &with_nan}) {
    (*layer)->trace_statistics().set_arithmetic(arithmetic);
    (*layer)->trace_statistics().set_simulated_copy_latency(latency_steps);
  }
  // One training step: both layers forward, then the aux-loss-free bias update. Returns the
  // expected values of both layers and the step's blocking transfers.
  struct StepResult {
    Expected full, with_nan;
    uint64_t blocking = 0;
  };
  const auto run_step = [&](const at::Tensor& input, const at::Tensor& nan_input) {
    StepResult result;
    result.full = forward_and_expect(full, input, result.blocking);
    result.with_nan = forward_and_expect(with_nan, nan_input, result.blocking);
    const uint64_t before = blocking_transfers();
    full->update_expert_bias();
    result.blocking += blocking_transfers() - before;
    result.full.expert_bias.push_back(to_floats(full->router->expert_bias));
    return result;
  };

  ASSERT_FALSE(is_trace_recording());
  const at::Tensor warmup = at::randn({kTokens, kHidden});
  const uint64_t plain = run_step(warmup, warmup).blocking;
  EXPECT_GT(plain, 0u);  // the runtime's own reads (group sizes, dropped count, NaN check)

  const std::string path = ::testing::TempDir() + "moescope_runtime_host_sync." +
                           std::to_string(latency_steps) + ".moetrace";
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  const HostTransferCounts recording_start = host_transfer_counts();
  constexpr int64_t kSteps = 3, kNanStep = 2, kNanToken = 5;
  std::map<int64_t, StepResult> expected;
  for (int64_t step = 1; step <= kSteps; ++step) {
    set_training_step(step);
    const at::Tensor input = at::randn({kTokens, kHidden});
    at::Tensor nan_input = at::randn({kTokens, kHidden});
    if (step == kNanStep) nan_input[kNanToken][0] = std::numeric_limits<float>::quiet_NaN();
    expected[step] = run_step(input, nan_input);
    // Recorded and plain differ in nothing but the recorder: the same count of waits.
    EXPECT_EQ(expected[step].blocking, plain) << "step " << step;
    if (latency_steps > 0) {
      EXPECT_GT(full->trace_statistics().num_pending(), 0u);  // still "in flight"
    }
  }
  full->trace_statistics().drain();
  with_nan->trace_statistics().drain();
  EXPECT_EQ(full->trace_statistics().num_pending(), 0u);
  // The statistics took the non-blocking path: per step two forwards and a bias update.
  EXPECT_EQ(host_transfer_counts().non_blocking - recording_start.non_blocking,
            static_cast<uint64_t>(kSteps * 3));
  moescope_recorder_stop();
  const WrittenTrace written = read_trace(path);
  std::remove(path.c_str());

  // The NaN layer: one token's logits over all experts, and its top-k expert rows.
  expected[kNanStep].with_nan.nonfinite_outputs = static_cast<uint32_t>(kTopK * kHidden);
  ASSERT_EQ(expected[kNanStep].with_nan.nonfinite_logits, static_cast<uint32_t>(kExperts));

  const double tolerance =
      arithmetic == StatisticsArithmetic::kTensorOps ? 1e-6 : 0.0;  // fp64 ops vs host loops
  const auto check_written = [&](const Written& record, int64_t step, const std::string& what) {
    // Written during the step it belongs to, or (copies in flight) during a later one, at
    // most `latency_steps` later; what is left is written by the drain after the last step.
    EXPECT_EQ(record.after_step_marker, std::min(step + latency_steps, kSteps)) << what;
  };
  std::map<std::tuple<int64_t, uint32_t, uint32_t>, int> loads_seen;
  for (const WrittenLoad& load : written.loads) {
    const int64_t step = load.record.step;
    ASSERT_TRUE(expected.count(step)) << "load of step " << step;
    const Expected& want =
        load.record.layer == kFullLayer ? expected[step].full : expected[step].with_nan;
    const std::string what = "load layer " + std::to_string(load.record.layer) + " step " +
                             std::to_string(step) + " scope " + std::to_string(load.record.scope);
    check_written(load, step, what);
    ++loads_seen[{step, load.record.layer, load.record.scope}];
    int64_t total = 0;
    for (uint32_t count : load.counts) total += count;
    if (load.record.scope == MOESCOPE_EXPERTS_RECEIVED) {
      EXPECT_EQ(total, want.num_received_rows) << what;
      continue;
    }
    EXPECT_EQ(std::vector<int64_t>(load.counts.begin(), load.counts.end()), want.tokens_per_expert)
        << what;
    EXPECT_EQ(static_cast<int64_t>(load.record.dropped_tokens), want.num_dropped) << what;
  }
  for (int64_t step = 1; step <= kSteps; ++step) {
    for (uint32_t layer : {static_cast<uint32_t>(kFullLayer), static_cast<uint32_t>(kNanLayer)}) {
      for (uint32_t scope :
           {MOESCOPE_EXPERTS_LOCAL, MOESCOPE_EXPERTS_GLOBAL, MOESCOPE_EXPERTS_RECEIVED}) {
        EXPECT_EQ((loads_seen[{step, layer, scope}]), 1) << step << " " << layer << " " << scope;
      }
    }
  }
  EXPECT_GT(expected[1].full.num_dropped, 0);  // the capacity limit did drop something

  std::map<std::pair<int64_t, uint32_t>, int> stats_seen;
  for (const WrittenStats& stats : written.stats) {
    const int64_t step = stats.record.step;
    ASSERT_TRUE(expected.count(step)) << "stats of step " << step;
    const Expected& want =
        stats.record.layer == kFullLayer ? expected[step].full : expected[step].with_nan;
    const std::string what =
        "stats layer " + std::to_string(stats.record.layer) + " step " + std::to_string(step);
    check_written(stats, step, what);
    ++stats_seen[{step, stats.record.layer}];
    expect_same(stats.record.aux_loss, want.aux_loss, 0.0, what + " aux_loss");
    expect_same(stats.record.z_loss, want.z_loss, 0.0, what + " z_loss");
    expect_same(stats.record.router_entropy, want.router.entropy, tolerance, what + " entropy");
    expect_same(stats.record.max_over_mean, max_over_mean(want.tokens_per_expert), 0.0,
                what + " max/mean");
    EXPECT_EQ(stats.record.nonfinite_logits, want.nonfinite_logits) << what;
    EXPECT_EQ(stats.record.nonfinite_outputs, want.nonfinite_outputs) << what;
  }
  EXPECT_EQ(stats_seen.size(), static_cast<size_t>(kSteps * 2));
  for (const auto& [key, count] : stats_seen) EXPECT_EQ(count, 1);

  // Per (layer, step): the mean probabilities; the full layer's bias at the forward, then after
  // the update.
  std::map<std::pair<int64_t, uint32_t>, std::vector<std::vector<float>>> biases;
  int mean_probs_seen = 0;
  for (const WrittenValues& values : written.values) {
    const int64_t step = values.record.step;
    ASSERT_TRUE(expected.count(step)) << "values of step " << step;
    const Expected& want =
        values.record.layer == kFullLayer ? expected[step].full : expected[step].with_nan;
    const std::string what =
        "values layer " + std::to_string(values.record.layer) + " step " + std::to_string(step);
    check_written(values, step, what);
    if (values.record.quantity == MOESCOPE_QUANTITY_ROUTER_BIAS) {
      biases[{step, values.record.layer}].push_back(values.values);
      continue;
    }
    ASSERT_EQ(values.record.quantity, static_cast<uint32_t>(MOESCOPE_QUANTITY_MEAN_PROB)) << what;
    ++mean_probs_seen;
    ASSERT_EQ(values.values.size(), want.router.mean_score.size()) << what;
    for (size_t e = 0; e < values.values.size(); ++e) {
      expect_same(values.values[e], want.router.mean_score[e], tolerance, what + " mean prob");
    }
  }
  EXPECT_EQ(mean_probs_seen, kSteps * 2);
  for (int64_t step = 1; step <= kSteps; ++step) {
    const auto full_key = std::make_pair(step, static_cast<uint32_t>(kFullLayer));
    EXPECT_EQ(biases[full_key], expected[step].full.expert_bias) << "bias of step " << step;
    EXPECT_FALSE((biases.count({step, static_cast<uint32_t>(kNanLayer)})));
  }
  EXPECT_NE(expected[kSteps].full.expert_bias[0], expected[kSteps].full.expert_bias[1]);
}

INSTANTIATE_TEST_SUITE_P(
    ArithmeticAndLatency, RecordingWithoutHostSync,
    ::testing::Combine(::testing::Values(Arithmetic{},
                                         Arithmetic{StatisticsArithmetic::kTensorOps}),
                       ::testing::Values(0, 1)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "TensorOps" : "DeviceDefault") + "Latency" +
             std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace moescope::runtime
