// The runtime's memory manager: the dispatch buffer pool (steady state without allocations), the
// per-rank receive cap (a cold-start stream stays under it), memory accounting by category and
// the expert-aware optimizer offload (bit-exact against a plain torch::optim::Adam/AdamW).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "moescope/balancer/expert_placement.h"
#include "moescope/balancer/load_predictor.h"
#include "moescope/recorder.h"
#include "moescope/runtime/dispatch_buffer_pool.h"
#include "moescope/runtime/expert_optimizer_offload.h"
#include "moescope/runtime/host_tensor_cache.h"
#include "moescope/runtime/memory_accounting.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/runtime/receive_cap.h"
#include "moescope/runtime/router.h"
#include "moescope/runtime/token_dispatcher.h"
#include "moescope/trace/trace_reader.h"

namespace moescope::runtime {
namespace {

// ---- a trace read back --------------------------------------------------------------------

struct RecordedMemory {
  std::map<uint32_t, std::string> strings;
  std::vector<trace::MemoryRecord> memory_events;
  std::multimap<std::string, double> counters;  // name -> values in order
};

RecordedMemory read_trace(const std::string& path) {
  RecordedMemory recorded;
  std::vector<trace::CounterRecord> counters;
  trace::TraceReader reader;
  EXPECT_TRUE(reader.open(path)) << path;
  trace::Chunk chunk;
  while (reader.next_chunk(chunk)) {
    for (const trace::RecordView record : chunk) {
      switch (record.kind()) {
        case trace::RecordKind::kString: {
          const auto fixed = record.as<trace::StringRecord>();
          recorded.strings[fixed.header.name] = std::string(
              reinterpret_cast<const char*>(record.tail<trace::StringRecord>()), fixed.length);
          break;
        }
        case trace::RecordKind::kMemory:
          recorded.memory_events.push_back(record.as<trace::MemoryRecord>());
          break;
        case trace::RecordKind::kCounter:
          counters.push_back(record.as<trace::CounterRecord>());
          break;
        default:
          break;
      }
    }
  }
  EXPECT_TRUE(reader.errors().empty());
  for (const auto& counter : counters) {
    recorded.counters.emplace(recorded.strings[counter.header.name], counter.value);
  }
  return recorded;
}

double last_counter(const RecordedMemory& recorded, const std::string& name) {
  const auto range = recorded.counters.equal_range(name);
  EXPECT_NE(range.first, range.second) << "no counter " << name;
  double value = std::nan("");
  for (auto it = range.first; it != range.second; ++it) value = it->second;
  return value;
}

// ---- DispatchBufferPool -------------------------------------------------------------------

DispatchBufferPoolOptions pool_options(int64_t hidden, double headroom) {
  DispatchBufferPoolOptions options;
  options.hidden_size = hidden;
  options.headroom = headroom;
  return options;
}

TEST(DispatchBufferPool, ReservesFromThePredictedLoadAndGrowsOnlyPastCapacity) {
  DispatchBufferPool pool(pool_options(16, 1.25));
  EXPECT_EQ(pool.stats().bytes_reserved, 0);
  pool.reserve_for_predicted_load(100.0);
  for (int k = 0; k < kNumDispatchBufferKinds; ++k) {
    EXPECT_EQ(pool.capacity_rows(static_cast<DispatchBufferKind>(k)), 125);
  }
  EXPECT_EQ(pool.stats().allocations, 4);
  EXPECT_EQ(pool.stats().bytes_reserved, 4 * 125 * 16 * 4);

  const at::Tensor first = pool.acquire(DispatchBufferKind::kDispatchReceive, 125);
  EXPECT_EQ(first.sizes(), (std::vector<int64_t>{125, 16}));
  EXPECT_EQ(first.scalar_type(), at::kFloat);
  const at::Tensor again = pool.acquire(DispatchBufferKind::kDispatchReceive, 7);
  EXPECT_EQ(again.data_ptr(), first.data_ptr());  // the same memory, handed out again
  EXPECT_EQ(pool.stats().reuses, 2);
  EXPECT_EQ(pool.stats().growths, 0);

  // A smaller forecast never shrinks; a step past capacity grows one buffer, with headroom.
  pool.reserve_for_predicted_load(10.0);
  EXPECT_EQ(pool.stats().allocations, 4);
  const at::Tensor grown = pool.acquire(DispatchBufferKind::kDispatchReceive, 126);
  EXPECT_EQ(grown.size(0), 126);
  EXPECT_EQ(pool.capacity_rows(DispatchBufferKind::kDispatchReceive), 158);  // ceil(126 * 1.25)
  EXPECT_EQ(pool.capacity_rows(DispatchBufferKind::kCombineSend), 125);
  EXPECT_EQ(pool.stats().allocations, 5);
  EXPECT_EQ(pool.stats().growths, 1);
  EXPECT_EQ(pool.stats().high_water_rows, 126);
  EXPECT_EQ(pool.stats().bytes_reserved, (3 * 125 + 158) * 16 * 4);
  EXPECT_EQ(pool.stats().peak_bytes_reserved, pool.stats().bytes_reserved);
  EXPECT_EQ(pool.acquire(DispatchBufferKind::kCombineReceive, 0).size(0), 0);
}

// A rank whose experts get no token at its first forward (moe_train --dispatch-pool without a
// rebalancer, which reserves first) acquires 0 rows from an empty pool.
TEST(DispatchBufferPool, NoRowsBeforeAnyReservationIsAnEmptyTensorOfThePoolsKind) {
  DispatchBufferPoolOptions options = pool_options(16, 1.25);
  options.dtype = at::kDouble;
  DispatchBufferPool pool(options);
  const at::Tensor none = pool.acquire(DispatchBufferKind::kDispatchReceive, 0);
  EXPECT_EQ(none.sizes(), (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(none.scalar_type(), at::kDouble);
  EXPECT_TRUE(none.device().is_cpu());
  EXPECT_EQ(pool.stats().allocations, 0);
  EXPECT_EQ(pool.capacity_rows(DispatchBufferKind::kDispatchReceive), 0);
  // The first rows then allocate as a first use, not a growth.
  EXPECT_EQ(pool.acquire(DispatchBufferKind::kDispatchReceive, 10).size(0), 10);
  EXPECT_EQ(pool.stats().allocations, 1);
  EXPECT_EQ(pool.stats().growths, 0);
}

TEST(DispatchBufferPool, SteadyStateMakesNoAllocationsAfterWarmUp) {
  // Per-rank received rows of a noisy but stationary load (8 experts on 4 ranks), forecast by
  // the balancer's EMA predictor; the pool is sized from the forecast's busiest rank.
  constexpr int kExperts = 8, kRanks = 4, kWarmUpSteps = 10, kSteadySteps = 200;
  const std::vector<double> mean_load = {400, 220, 180, 150, 120, 100, 90, 60};
  std::mt19937 rng(7);
  balancer::EmaLoadPredictor predictor(kExperts, 0.2);
  DispatchBufferPool pool(pool_options(32, 1.25));

  int64_t allocations_after_warm_up = -1;
  for (int step = 0; step < kWarmUpSteps + kSteadySteps; ++step) {
    std::vector<double> load(kExperts);
    for (int e = 0; e < kExperts; ++e) {
      std::normal_distribution<double> noise(mean_load[e], 0.05 * mean_load[e]);
      load[e] = std::max(0.0, std::round(noise(rng)));
    }
    if (predictor.num_observed_steps() > 0) {
      const balancer::GpuLoadBalance forecast = balancer::summarize_gpu_loads(
          balancer::gpu_loads_without_replicas(predictor.predict(), kRanks));
      pool.reserve_for_predicted_load(forecast.max_gpu_load);
    }
    const std::vector<double> rank_rows = balancer::gpu_loads_without_replicas(load, kRanks);
    const double local_rows = std::accumulate(load.begin(), load.end(), 0.0) / kRanks;
    const auto received =
        static_cast<int64_t>(*std::max_element(rank_rows.begin(), rank_rows.end()));
    pool.acquire(DispatchBufferKind::kDispatchSend, static_cast<int64_t>(local_rows));
    pool.acquire(DispatchBufferKind::kDispatchReceive, received).fill_(1.0f);
    pool.acquire(DispatchBufferKind::kCombineSend, received);
    pool.acquire(DispatchBufferKind::kCombineReceive, static_cast<int64_t>(local_rows));
    predictor.observe(load);
    if (step == kWarmUpSteps - 1) allocations_after_warm_up = pool.stats().allocations;
  }
  EXPECT_GT(allocations_after_warm_up, 0);
  EXPECT_EQ(pool.stats().allocations, allocations_after_warm_up)
      << "steady state allocated; growths " << pool.stats().growths;
  EXPECT_EQ(pool.stats().acquires, 4 * (kWarmUpSteps + kSteadySteps));
  EXPECT_GE(pool.stats().reuses, 4 * kSteadySteps);
  EXPECT_GE(pool.capacity_rows(DispatchBufferKind::kDispatchReceive), pool.stats().high_water_rows);
}

TEST(DispatchBufferPool, RejectsBadArgumentsByName) {
  EXPECT_THROW(
      {
        try {
          DispatchBufferPool pool(pool_options(0, 1.25));
        } catch (const c10::Error& error) {
          EXPECT_NE(std::string(error.what()).find("hidden_size"), std::string::npos);
          throw;
        }
      },
      c10::Error);
  EXPECT_THROW(DispatchBufferPool(pool_options(8, 0.5)), c10::Error);
  DispatchBufferPool pool(pool_options(8, 1.0));
  try {
    pool.acquire(DispatchBufferKind::kCombineSend, -1);
    ADD_FAILURE() << "negative rows accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("combine_send"), std::string::npos) << error.what();
  }
  EXPECT_THROW(pool.reserve_for_predicted_load(std::nan("")), c10::Error);
}

// ---- ReceiveCap ---------------------------------------------------------------------------

at::Tensor longs(std::vector<int64_t> values) {
  return at::tensor(values, at::kLong);
}
/// 0/1 as a bool tensor (at::tensor has no bool overload on CPU).
at::Tensor bools(std::vector<int64_t> values) {
  return longs(std::move(values)).to(at::kBool);
}

TEST(ReceiveCap, KeepsEverythingUnderTheCap) {
  ReceiveCap cap({/*max_rows=*/8, ReceiveCapPolicy::kFail});
  const ReceiveCapResult result =
      cap.apply(longs({0, 0, 1, 2}), at::rand({4}), longs({0, 1, 2, 3}), 3);
  EXPECT_TRUE(result.keep_mask.all().item<bool>());
  EXPECT_EQ(result.num_dropped_rows, 0);
  EXPECT_TRUE(at::equal(result.rows_per_expert, longs({2, 1, 1})));
  EXPECT_TRUE(at::equal(result.dropped_per_expert, longs({0, 0, 0})));
}

TEST(ReceiveCap, DropsTheLowestProbabilityRows) {
  ReceiveCap cap({/*max_rows=*/3, ReceiveCapPolicy::kDropLowestProbability});
  // rows:            0    1    2    3    4    5
  const at::Tensor experts = longs({0, 0, 0, 1, 1, 2});
  const at::Tensor weights = at::tensor({0.9, 0.1, 0.5, 0.5, 0.2, 0.7}, at::kFloat);
  const ReceiveCapResult result = cap.apply(experts, weights, at::Tensor(), 3);
  // Kept: 0.9 (row 0), 0.7 (row 5), then the tie 0.5 goes to the lower row (2).
  EXPECT_TRUE(at::equal(result.keep_mask, bools({1, 0, 1, 0, 0, 1})));
  EXPECT_EQ(result.num_kept_rows, 3);
  EXPECT_EQ(result.num_dropped_rows, 3);
  EXPECT_TRUE(at::equal(result.kept_per_expert, longs({2, 0, 1})));
  EXPECT_TRUE(at::equal(result.dropped_per_expert, longs({1, 2, 0})));
  EXPECT_EQ(cap.stats().capped_forwards, 1);
  EXPECT_EQ(cap.stats().dropped_rows, 3);
}

TEST(ReceiveCap, DropsTheLatestTokensByPosition) {
  ReceiveCap cap({/*max_rows=*/2, ReceiveCapPolicy::kDropLatestPosition});
  // Expert-sorted rows: expert 0 got tokens 5 and 9, expert 1 tokens 1 and 7.
  const ReceiveCapResult result =
      cap.apply(longs({0, 0, 1, 1}), at::Tensor(), longs({5, 9, 1, 7}), 2);
  EXPECT_TRUE(at::equal(result.keep_mask, bools({1, 0, 1, 0})));
  EXPECT_TRUE(at::equal(result.dropped_per_expert, longs({1, 1})));
}

TEST(ReceiveCap, FailPolicyNamesTheCapAndTheLoad) {
  ReceiveCap cap({/*max_rows=*/5, ReceiveCapPolicy::kFail});
  try {
    cap.apply(longs({0, 0, 0, 0, 1, 1, 1, 1}), at::Tensor(), at::Tensor(), 2);
    ADD_FAILURE() << "over-cap forward accepted";
  } catch (const c10::Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("received 8 rows"), std::string::npos) << message;
    EXPECT_NE(message.find("[4, 4]"), std::string::npos) << message;
    EXPECT_NE(message.find("max_rows = 5"), std::string::npos) << message;
  }
}

TEST(ReceiveCap, RejectsBadArgumentsByName) {
  EXPECT_THROW(ReceiveCap({0, ReceiveCapPolicy::kFail}), c10::Error);
  ReceiveCap cap({1, ReceiveCapPolicy::kDropLowestProbability});
  try {
    cap.apply(longs({0, 3}), at::rand({2}), at::Tensor(), 3);
    ADD_FAILURE() << "expert id 3 of 3 accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("local_expert_of_row"), std::string::npos);
  }
  try {
    cap.apply(longs({0, 1}), at::Tensor(), at::Tensor(), 3);
    ADD_FAILURE() << "missing row_weights accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("row_weights"), std::string::npos);
  }
  EXPECT_THROW(cap.apply(longs({0, 1}), at::rand({3}), at::Tensor(), 3), c10::Error);
}

TEST(ReceiveCap, SplitsTheCapAmongSourcesInProportion) {
  EXPECT_TRUE(at::equal(split_receive_cap(longs({10, 30, 60}), 50), longs({5, 15, 30})));
  EXPECT_TRUE(at::equal(split_receive_cap(longs({1, 1, 1}), 2), longs({1, 1, 0})));
  EXPECT_TRUE(at::equal(split_receive_cap(longs({4, 0, 3}), 100), longs({4, 0, 3})));
  // 7 * 10 / 12 = 5.83, 5 * 10 / 12 = 4.17: floors 5 + 4, the last row to the larger remainder.
  EXPECT_TRUE(at::equal(split_receive_cap(longs({7, 5}), 10), longs({6, 4})));
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> incoming(6);
    for (auto& rows : incoming) rows = std::uniform_int_distribution<int64_t>(0, 500)(rng);
    const int64_t cap = std::uniform_int_distribution<int64_t>(1, 1500)(rng);
    const at::Tensor quota = split_receive_cap(longs(incoming), cap);
    const int64_t total = std::accumulate(incoming.begin(), incoming.end(), int64_t{0});
    EXPECT_EQ(quota.sum().item<int64_t>(), std::min(total, cap));
    EXPECT_TRUE((quota <= longs(incoming)).all().item<bool>());
    EXPECT_TRUE((quota >= 0).all().item<bool>());
  }
  EXPECT_THROW(split_receive_cap(longs({-1, 2}), 4), c10::Error);
}

TEST(ReceiveCap, ColdStartStreamWithSkewedRouterStaysUnderTheCap) {
  // 16 experts on 4 (simulated) ranks; rank 0 holds experts 0..3, which a strong logit skew
  // favours at the start. The skew fades over the first steps, as a router learning balance.
  constexpr int64_t kExperts = 16, kRanks = 4, kLocal = kExperts / kRanks, kHidden = 16;
  constexpr int64_t kTokens = 256, kTopK = 2, kSteps = 16;
  const int64_t balanced_rows = kTokens * kTopK / kRanks;  // 128
  const int64_t max_rows = balanced_rows * 3 / 2;          // 192
  MoEConfig config;
  config.hidden_size = kHidden;
  config.ffn_hidden_size = 32;
  config.num_experts = kExperts;
  config.top_k = kTopK;
  // The router adds its logit_skew buffer only when configured with a skew; the loop fades it.
  config.gate_logit_skew = make_gate_skew(kExperts, 6.0);
  torch::manual_seed(11);
  Router router(config);
  ReceiveCap cap({max_rows, ReceiveCapPolicy::kDropLowestProbability});
  DispatchBufferPool pool(pool_options(kHidden, /*headroom=*/1.0));
  pool.reserve_for_predicted_load(static_cast<double>(max_rows));  // the cap bounds the buffer

  std::vector<int64_t> dropped_per_step;
  for (int64_t step = 0; step < kSteps; ++step) {
    const double strength = std::max(0.0, 6.0 * (1.0 - static_cast<double>(step) / 8.0));
    router->logit_skew.copy_(at::tensor(make_gate_skew(kExperts, strength), at::kDouble));
    const at::Tensor hidden = at::randn({kTokens, kHidden});
    const RoutingResult routing = router->forward(hidden);
    const DispatchPlan plan = build_dispatch_plan(routing.top_k_indices, at::Tensor(), kExperts);
    const at::Tensor row_expert =
        routing.top_k_indices.flatten().index_select(0, plan.row_to_assignment);
    const at::Tensor to_rank0 = row_expert < kLocal;
    const at::Tensor local_expert = row_expert.masked_select(to_rank0);
    const at::Tensor weights =
        routing.top_k_weights.detach().flatten().index_select(0, plan.row_to_assignment);
    const ReceiveCapResult result = cap.apply(local_expert, weights.masked_select(to_rank0),
                                              plan.row_to_token.masked_select(to_rank0), kLocal);

    ASSERT_LE(result.num_kept_rows, max_rows);
    ASSERT_EQ(result.keep_mask.sum().item<int64_t>(), result.num_kept_rows);
    EXPECT_EQ(result.dropped_per_expert.sum().item<int64_t>(), result.num_dropped_rows);
    // The kept rows go into the receive buffer, which the cap keeps from growing.
    const at::Tensor kept_tokens =
        plan.row_to_token.masked_select(to_rank0).masked_select(result.keep_mask);
    at::Tensor receive = pool.acquire(DispatchBufferKind::kDispatchReceive, result.num_kept_rows);
    at::index_select_out(receive, hidden, 0, kept_tokens);
    if (result.num_dropped_rows > 0) {
      // Every dropped row weighs no more than the lightest kept one.
      const at::Tensor local_weights = weights.masked_select(to_rank0);
      EXPECT_LE(local_weights.masked_select(~result.keep_mask).max().item<float>(),
                local_weights.masked_select(result.keep_mask).min().item<float>());
    }
    dropped_per_step.push_back(result.num_dropped_rows);
  }
  EXPECT_GT(dropped_per_step.front(), 0) << "the cold start did not exceed the cap";
  EXPECT_EQ(dropped_per_step.back(), 0) << "a balanced router still hit the cap";
  EXPECT_EQ(cap.stats().forwards, kSteps);
  EXPECT_EQ(cap.stats().dropped_rows,
            std::accumulate(dropped_per_step.begin(), dropped_per_step.end(), int64_t{0}));
  EXPECT_GT(cap.stats().max_received_rows, max_rows);
  EXPECT_EQ(pool.stats().growths, 0);
  EXPECT_EQ(pool.stats().allocations, kNumDispatchBufferKinds);
}

// ---- MemoryAccounting ---------------------------------------------------------------------

/// A module with known sizes: routed experts, shared experts, a router and an int64 buffer.
struct ToyMoE : torch::nn::Module {
  ToyMoE() {
    experts = register_module("experts", std::make_shared<torch::nn::Module>());
    shared_experts = register_module("shared_experts", std::make_shared<torch::nn::Module>());
    w_gate_up = experts->register_parameter("w_gate_up", at::randn({4, 8, 16}));  // 2048 B
    w_down = experts->register_parameter("w_down", at::randn({4, 16, 8}));        // 2048 B
    shared = shared_experts->register_parameter("w", at::randn({8, 8}));          // 256 B
    gate = register_parameter("gate_weight", at::randn({4, 8}, at::kDouble));     // 256 B
    counts = register_buffer("counts", at::zeros({4}, at::kLong));                // 32 B
  }
  std::shared_ptr<torch::nn::Module> experts, shared_experts;
  at::Tensor w_gate_up, w_down, shared, gate, counts;
};

TEST(MemoryAccounting, ClassifiesExpertParameterNames) {
  EXPECT_TRUE(is_routed_expert_parameter("layers.3.moe.experts.w_gate_up"));
  EXPECT_TRUE(is_routed_expert_parameter("experts.w_down"));
  EXPECT_FALSE(is_routed_expert_parameter("moe.shared_experts.w_down"));
  EXPECT_FALSE(is_routed_expert_parameter("router.gate_weight"));
  EXPECT_FALSE(is_routed_expert_parameter("experts"));
  EXPECT_FALSE(is_routed_expert_parameter("num_experts.bias"));
}

TEST(MemoryAccounting, CountsEveryCategoryFromKnownTensorSizes) {
  ToyMoE model;
  DispatchBufferPool pool(pool_options(8, 1.0));
  pool.reserve_for_predicted_load(10.0);  // 4 buffers x 10 rows x 8 x 4 B = 1280 B

  MemorySources sources;
  sources.model = &model;
  sources.dispatch_buffers = {&pool};
  sources.activation_bytes = 999;
  MemoryBreakdown before = measure_memory(sources);
  EXPECT_EQ(before[MemoryCategory::kExpertWeights], 4096);
  EXPECT_EQ(before[MemoryCategory::kOther], 256 + 256 + 32);
  EXPECT_EQ(before[MemoryCategory::kOptimizerState], 0);
  EXPECT_EQ(before[MemoryCategory::kDispatchBuffers], 1280);
  EXPECT_EQ(before[MemoryCategory::kActivations], 999);
  EXPECT_EQ(before.total(), 4096 + 544 + 1280 + 999);

  // Gradients count with their parameters; Adam holds two moments per expert weight, SGD with
  // momentum one buffer per other parameter; the offloaded expert state is reported apart.
  for (auto& param : model.parameters()) param.mutable_grad() = at::ones_like(param);
  torch::optim::SGD others({model.shared, model.gate}, torch::optim::SGDOptions(0.1).momentum(0.9));
  others.step();
  ExpertOptimizerOffload expert_optimizer({model.w_gate_up, model.w_down}, {});
  expert_optimizer.step();
  expert_optimizer.offload_expert(2);  // a quarter of the expert state: 2 x 4096 / 4
  sources.optimizers = {&others};
  sources.expert_optimizers = {&expert_optimizer};
  const MemoryBreakdown after = measure_memory(sources);
  EXPECT_EQ(after[MemoryCategory::kExpertWeights], 2 * 4096);
  EXPECT_EQ(after[MemoryCategory::kOther], 2 * 512 + 32);
  EXPECT_EQ(after[MemoryCategory::kOptimizerState], 512 + 2 * 4096 * 3 / 4);
  EXPECT_EQ(after.offloaded_optimizer_state_bytes, 2 * 4096 / 4);
  EXPECT_EQ(optimizer_state_bytes(others), 512);
}

TEST(MemoryAccounting, MeasuresAnMoELayer) {
  MoEConfig config;
  config.hidden_size = 16;
  config.ffn_hidden_size = 24;
  config.num_experts = 4;
  config.num_shared_experts = 1;
  MoELayer layer(config);
  MemorySources sources;
  sources.model = layer.get();
  const MemoryBreakdown breakdown = measure_memory(sources);
  const int64_t expert_bytes = layer->experts->w_gate_up.nbytes() + layer->experts->w_down.nbytes();
  EXPECT_EQ(breakdown[MemoryCategory::kExpertWeights], expert_bytes);
  int64_t all_bytes = 0;
  for (const auto& param : layer->parameters()) all_bytes += param.nbytes();
  for (const auto& buffer : layer->buffers()) all_bytes += buffer.nbytes();
  EXPECT_EQ(breakdown[MemoryCategory::kOther], all_bytes - expert_bytes);
  EXPECT_GT(breakdown[MemoryCategory::kOther], 0);  // router and shared experts
}

// ---- recorded events ----------------------------------------------------------------------

TEST(MemoryManagerTrace, PoolEventsAndMemoryCountersReachTheTrace) {
  const std::string path = ::testing::TempDir() + "moescope_memory_manager.moetrace";
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  MemoryBreakdown breakdown;
  {
    DispatchBufferPool pool(pool_options(8, 1.0));
    pool.reserve_for_predicted_load(10.0);                   // 4 allocations of 320 B
    pool.acquire(DispatchBufferKind::kDispatchReceive, 20);  // free 320 B, allocate 640 B
    ToyMoE model;
    MemorySources sources;
    sources.model = &model;
    sources.dispatch_buffers = {&pool};
    sources.activation_bytes = 12345;
    HostTensorCache cache(64 << 20, 1 << 20);
    const at::Tensor held = cache.empty({1 << 20}, at::kFloat);  // a 4 MiB + 1/8 block
    sources.host_tensor_cache = &cache;
    breakdown = measure_memory(sources);
    EXPECT_EQ(breakdown.host_tensor_cache_bytes, (4 << 20) + (1 << 19));
    record_memory_breakdown(breakdown);
    ReceiveCap cap({1, ReceiveCapPolicy::kDropLatestPosition});
    ReceiveCap::record(cap.apply(longs({0, 0, 0}), at::Tensor(), longs({0, 1, 2}), 1));
  }  // the pool releases its 4 buffers
  moescope_recorder_stop();

  const RecordedMemory recorded = read_trace(path);
  std::vector<uint64_t> allocated, freed;
  for (const auto& event : recorded.memory_events) {
    if (event.category != MOESCOPE_MEM_DISPATCH_BUFFERS) continue;
    EXPECT_EQ(event.device, -1);
    (event.is_free ? freed : allocated).push_back(event.bytes);
  }
  EXPECT_EQ(allocated, (std::vector<uint64_t>{320, 320, 320, 320, 640}));
  ASSERT_EQ(freed.size(), 5u);
  EXPECT_EQ(std::accumulate(freed.begin(), freed.end(), uint64_t{0}), 4 * 320 + 640);
  EXPECT_EQ(last_counter(recorded, "memory.expert_weights"), 4096);
  EXPECT_EQ(last_counter(recorded, "memory.other"), 544);
  EXPECT_EQ(last_counter(recorded, "memory.dispatch_buffers"), 3 * 320 + 640);
  EXPECT_EQ(last_counter(recorded, "memory.activations"), 12345);
  EXPECT_EQ(last_counter(recorded, "memory.total"), static_cast<double>(breakdown.total()));
  EXPECT_EQ(last_counter(recorded, "memory.host_tensor_cache"), (4 << 20) + (1 << 19));
  EXPECT_EQ(last_counter(recorded, "receive_cap.dropped_rows"), 2);
}

// Name ids belong to one recording: a second recording in the same process (a restarted
// recorder, a forked child's own trace) must still name every counter.
TEST(MemoryManagerTrace, CountersKeepTheirNamesInASecondRecording) {
  ToyMoE model;
  MemorySources sources;
  sources.model = &model;
  auto record_counters = [&] {
    DispatchBufferPool pool(pool_options(8, 1.0));
    pool.reserve_for_predicted_load(10.0);
    sources.dispatch_buffers = {&pool};
    record_memory_breakdown(measure_memory(sources));
    ReceiveCap cap({1, ReceiveCapPolicy::kDropLatestPosition});
    ReceiveCap::record(cap.apply(longs({0, 0, 0}), at::Tensor(), longs({0, 1, 2}), 1));
  };
  const std::string first = ::testing::TempDir() + "moescope_memory_first.moetrace";
  const std::string second = ::testing::TempDir() + "moescope_memory_second.moetrace";
  ASSERT_EQ(moescope_recorder_start(first.c_str(), nullptr), 0);
  record_counters();
  moescope_recorder_stop();
  ASSERT_EQ(moescope_recorder_start(second.c_str(), nullptr), 0);
  for (const char* decoy : {"decoy.a", "decoy.b", "decoy.c", "decoy.d", "decoy.e"}) {
    moescope_counter(moescope_intern(decoy), -1.0);  // takes the ids the first recording used
  }
  record_counters();
  moescope_recorder_stop();

  const RecordedMemory recorded = read_trace(second);
  EXPECT_EQ(last_counter(recorded, "memory.expert_weights"), 4096);
  EXPECT_EQ(last_counter(recorded, "memory.dispatch_buffers"), 4 * 320);
  EXPECT_EQ(last_counter(recorded, "receive_cap.dropped_rows"), 2);
  for (const auto& [name, value] : recorded.counters) {
    if (name.starts_with("decoy.")) {
      EXPECT_EQ(value, -1.0) << name;
    }
  }
}

// ---- ExpertOptimizerOffload ---------------------------------------------------------------

std::unique_ptr<torch::optim::Optimizer> make_reference(ExpertOptimizerKind kind,
                                                        const std::vector<at::Tensor>& params,
                                                        const ExpertOptimizerOptions& o) {
  const auto betas = std::make_tuple(o.beta1, o.beta2);
  if (kind == ExpertOptimizerKind::kAdam) {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr)
                                                            .betas(betas)
                                                            .eps(o.eps)
                                                            .weight_decay(o.weight_decay)
                                                            .amsgrad(o.amsgrad));
  }
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr)
                                                           .betas(betas)
                                                           .eps(o.eps)
                                                           .weight_decay(o.weight_decay)
                                                           .amsgrad(o.amsgrad));
}

/// The reference optimizer's state of stacked parameter `param`, expert slice `expert`.
template <typename State>
std::vector<at::Tensor> reference_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                                        int64_t expert) {
  auto& state = static_cast<State&>(*optimizer.state().at(param.unsafeGetTensorImpl()));
  std::vector<at::Tensor> slices = {state.exp_avg().select(0, expert),
                                    state.exp_avg_sq().select(0, expert)};
  if (state.max_exp_avg_sq().defined()) slices.push_back(state.max_exp_avg_sq().select(0, expert));
  return slices;
}

void expect_matches_reference(ExpertOptimizerKind kind, bool amsgrad, double weight_decay) {
  SCOPED_TRACE(std::string(kind == ExpertOptimizerKind::kAdam ? "Adam" : "AdamW") +
               (amsgrad ? " amsgrad" : ""));
  constexpr int64_t kExperts = 4;
  torch::manual_seed(5);
  std::vector<at::Tensor> params = {at::randn({kExperts, 8, 16}), at::randn({kExperts, 16, 8})};
  std::vector<at::Tensor> reference_params;
  for (const auto& p : params) reference_params.push_back(p.clone());
  ExpertOptimizerOptions options;
  options.kind = kind;
  options.lr = 0.01;
  options.amsgrad = amsgrad;
  options.weight_decay = weight_decay;
  options.cold_load_threshold = 1.0;
  ExpertOptimizerOffload offload(params, options);
  auto reference = make_reference(kind, reference_params, options);
  const int64_t state_tensors = amsgrad ? 3 : 2;
  const int64_t expert_state_bytes = state_tensors * (8 * 16 + 16 * 8) * 4;

  // Predicted loads per step: experts 1 and 3 go cold, then 1 comes back and 0 goes cold.
  const std::vector<std::vector<double>> forecasts = {
      {10, 10, 10, 10}, {10, 0.5, 3, 0}, {10, 0.5, 3, 0}, {0, 5, 5, 0.9}, {2, 2, 2, 2}};
  for (size_t step = 0; step < forecasts.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<at::Tensor> state_before(kExperts);
    std::vector<const void*> address_before(kExperts, nullptr);
    std::vector<bool> offloaded_before(kExperts);
    for (int64_t g = 0; g < kExperts; ++g) {
      const ExpertParamState s = offload.state(g, 0);
      offloaded_before[g] = offload.is_offloaded(g);
      if (s.exp_avg.defined()) {
        state_before[g] = s.exp_avg.clone();
        address_before[g] = s.exp_avg.data_ptr();
      }
    }
    const OffloadDecision decision = offload.update_from_predicted_load(forecasts[step]);
    for (int64_t g = 0; g < kExperts; ++g) {
      const bool cold = forecasts[step][g] < 1.0;
      EXPECT_EQ(offload.is_offloaded(g), cold) << "expert " << g;
      const ExpertParamState s = offload.state(g, 0);
      if (state_before[g].defined()) {
        EXPECT_TRUE(at::equal(s.exp_avg, state_before[g]))
            << "state changed by a move, expert " << g;
        // A moved expert's state is a new copy (host or device), an unmoved one the same tensor.
        EXPECT_EQ(s.exp_avg.data_ptr() != address_before[g], cold != offloaded_before[g])
            << "expert " << g;
      }
    }
    if (step == 1) {
      EXPECT_EQ(decision.offloaded, (std::vector<int64_t>{1, 3}));
      EXPECT_EQ(offload.offloaded_state_bytes(), 2 * expert_state_bytes);
      EXPECT_EQ(offload.state(1, 0).exp_avg.device(), at::Device(at::kCPU));
    }
    if (step == 3) {
      EXPECT_EQ(decision.prefetched, (std::vector<int64_t>{1}));
      EXPECT_EQ(decision.offloaded, (std::vector<int64_t>{0}));
    }
    const int64_t offloaded = static_cast<int64_t>(offload.offloaded_experts().size());
    if (step > 0) {
      EXPECT_EQ(offload.offloaded_state_bytes(), offloaded * expert_state_bytes);
      EXPECT_EQ(offload.resident_state_bytes(), (kExperts - offloaded) * expert_state_bytes);
    }

    // The same gradients for both; expert 2 gets no tokens (a zero gradient slice) at step 2.
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor grad = at::randn(params[i].sizes());
      if (step == 2) grad.select(0, 2).zero_();
      params[i].mutable_grad() = grad;
      reference_params[i].mutable_grad() = grad.clone();
    }
    offload.step();
    reference->step();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(at::equal(params[i], reference_params[i])) << "parameter " << i;
      for (int64_t g = 0; g < kExperts; ++g) {
        const ExpertParamState mine = offload.state(g, static_cast<int64_t>(i));
        const std::vector<at::Tensor> theirs =
            kind == ExpertOptimizerKind::kAdam
                ? reference_state<torch::optim::AdamParamState>(*reference, reference_params[i], g)
                : reference_state<torch::optim::AdamWParamState>(*reference, reference_params[i],
                                                                 g);
        EXPECT_EQ(mine.step, static_cast<int64_t>(step + 1));
        EXPECT_TRUE(at::equal(mine.exp_avg, theirs[0])) << "exp_avg " << i << " expert " << g;
        EXPECT_TRUE(at::equal(mine.exp_avg_sq, theirs[1])) << "exp_avg_sq " << i << " expert " << g;
        if (amsgrad) {
          EXPECT_TRUE(at::equal(mine.max_exp_avg_sq, theirs[2]));
        }
      }
    }
  }
  EXPECT_EQ(offload.stats().offloads, 3);
  EXPECT_EQ(offload.stats().prefetches, 3);  // 1 at step 3, 0 and 3 at step 4
  EXPECT_GT(offload.stats().host_steps, 0);
  EXPECT_GT(offload.stats().device_steps, 0);
  EXPECT_EQ(offload.stats().bytes_to_host, 3 * expert_state_bytes);
  EXPECT_EQ(offload.stats().bytes_to_device, 3 * expert_state_bytes);
}

TEST(ExpertOptimizerOffload, AdamStepsAndStateMatchAPlainAdamAcrossOffloadAndPrefetch) {
  expect_matches_reference(ExpertOptimizerKind::kAdam, /*amsgrad=*/false, /*weight_decay=*/0.0);
  expect_matches_reference(ExpertOptimizerKind::kAdam, /*amsgrad=*/true, /*weight_decay=*/0.01);
}

TEST(ExpertOptimizerOffload, AdamWStepsAndStateMatchAPlainAdamWAcrossOffloadAndPrefetch) {
  expect_matches_reference(ExpertOptimizerKind::kAdamW, /*amsgrad=*/false, /*weight_decay=*/0.1);
}

TEST(ExpertOptimizerOffload, RejectsBadArgumentsByName) {
  const auto expect_error = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error, expected one naming " << needle;
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  expect_error(
      [] {
        ExpertOptimizerOffload({at::zeros({4, 2}), at::zeros({3, 2})}, {});
      },
      "expert_parameters[1]");
  expect_error([] { ExpertOptimizerOffload({at::zeros({4})}, {}); }, "expert_parameters[0]");
  ExpertOptimizerOffload offload({at::zeros({4, 2})}, {});
  expect_error([&] { offload.offload_expert(4); }, "expert 4");
  expect_error(
      [&] {
        offload.update_from_predicted_load(std::vector<double>{1, 2});
      },
      "predicted_tokens_per_step");
  expect_error(
      [&] {
        offload.update_from_predicted_load(std::vector<double>{1, 2, -1, 0});
      },
      "expert 2");
}

TEST(ExpertOptimizerOffload, SkipsParametersWithoutGradients) {
  at::Tensor with_grad = at::randn({2, 3, 3});
  at::Tensor without_grad = at::randn({2, 3, 3});
  const at::Tensor untouched = without_grad.clone();
  ExpertOptimizerOffload offload({with_grad, without_grad}, {});
  offload.offload_expert(1);
  with_grad.mutable_grad() = at::ones_like(with_grad);
  const at::Tensor before = with_grad.clone();
  offload.step();
  EXPECT_FALSE(at::equal(with_grad, before));
  EXPECT_TRUE(at::equal(without_grad, untouched));
  EXPECT_FALSE(offload.state(0, 1).exp_avg.defined());
  EXPECT_TRUE(offload.state(1, 0).exp_avg.defined());
  offload.zero_grad();
  EXPECT_FALSE(with_grad.grad().defined());
}

}  // namespace
}  // namespace moescope::runtime
