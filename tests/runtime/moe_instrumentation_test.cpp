// The runtime's trace events, read back from a real recording: phase spans, expert loads with
// dropped tokens, router statistics and the NaN/Inf counts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "moe_reference.h"
#include "moescope/recorder.h"
#include "moescope/runtime/layer_statistics.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/trace/trace_reader.h"

namespace moescope::runtime {
namespace {

struct RecordedTrace {
  std::map<uint32_t, std::string> strings;
  std::vector<uint32_t> span_names;
  std::vector<std::pair<trace::ExpertLoadRecord, std::vector<uint32_t>>> loads;
  std::vector<trace::LayerStatsRecord> stats;
};

RecordedTrace read_trace(const std::string& path) {
  RecordedTrace recorded;
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
        case trace::RecordKind::kSpanBegin:
          recorded.span_names.push_back(record.header().name);
          break;
        case trace::RecordKind::kExpertLoad: {
          const auto fixed = record.as<trace::ExpertLoadRecord>();
          std::vector<uint32_t> counts(fixed.num_experts);
          std::memcpy(counts.data(), record.tail<trace::ExpertLoadRecord>(),
                      counts.size() * sizeof(uint32_t));
          recorded.loads.emplace_back(fixed, counts);
          break;
        }
        case trace::RecordKind::kLayerStats:
          recorded.stats.push_back(record.as<trace::LayerStatsRecord>());
          break;
        default:
          break;
      }
    }
  }
  EXPECT_TRUE(reader.errors().empty());
  return recorded;
}

TEST(MoEInstrumentation, ForwardRecordsPhasesLoadsDropsAndNonFiniteCounts) {
  const std::string path = ::testing::TempDir() + "moescope_runtime_instrumentation.moetrace";
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  ASSERT_TRUE(is_trace_recording());
  set_training_step(3);

  MoEConfig config = testing::small_config();
  config.layer_index = 5;
  config.aux_loss_coeff = 0.01;
  config.capacity_factor = 0.5;
  torch::manual_seed(1);
  MoELayer layer(config);
  const MoEOutput out = layer->forward(at::randn({64, 16}));

  MoEConfig unchecked_config = testing::small_config();
  unchecked_config.layer_index = 6;
  unchecked_config.nonfinite_policy = NonFinitePolicy::kDontCheck;
  MoELayer unchecked(unchecked_config);
  at::Tensor bad = at::randn({32, 16});
  bad[7][0] = std::numeric_limits<float>::quiet_NaN();
  unchecked->forward(bad);
  moescope_recorder_stop();

  const RecordedTrace recorded = read_trace(path);
  std::remove(path.c_str());

  std::set<std::string> span_names;
  for (uint32_t id : recorded.span_names) span_names.insert(recorded.strings.at(id));
  for (const char* phase :
       {"moe.layer", "moe.route", "moe.permute", "moe.experts", "moe.unpermute"}) {
    EXPECT_TRUE(span_names.count(phase)) << phase;
  }

  bool saw_local = false, saw_global = false;
  for (const auto& [load, counts] : recorded.loads) {
    if (load.layer != 5) continue;
    EXPECT_EQ(load.step, 3);
    ASSERT_EQ(counts.size(), 8u);
    int64_t total = 0;
    for (uint32_t c : counts) total += c;
    if (load.scope == MOESCOPE_EXPERTS_LOCAL || load.scope == MOESCOPE_EXPERTS_GLOBAL) {
      EXPECT_EQ(total, 64 * 2);
      EXPECT_EQ(static_cast<int64_t>(load.dropped_tokens), out.num_dropped);
      saw_local |= load.scope == MOESCOPE_EXPERTS_LOCAL;
      saw_global |= load.scope == MOESCOPE_EXPERTS_GLOBAL;
    }
    if (load.scope == MOESCOPE_EXPERTS_RECEIVED) {
      EXPECT_EQ(total, 64 * 2 - out.num_dropped);
    }
  }
  EXPECT_TRUE(saw_local);
  EXPECT_TRUE(saw_global);
  EXPECT_GT(out.num_dropped, 0);

  int layers_seen = 0;
  for (const auto& stats : recorded.stats) {
    if (stats.layer == 5) {
      ++layers_seen;
      EXPECT_NEAR(stats.aux_loss, out.losses.aux_loss.item<float>(), 1e-6);
      EXPECT_GT(stats.router_entropy, 0.0f);
      EXPECT_GE(stats.max_over_mean, 1.0f);
      EXPECT_EQ(stats.nonfinite_logits, 0u);
    } else if (stats.layer == 6) {
      ++layers_seen;
      EXPECT_EQ(stats.nonfinite_logits, 8u);         // one token's logits over 8 experts
      EXPECT_EQ(stats.nonfinite_outputs, 2u * 16u);  // its two expert rows of width 16
    }
  }
  EXPECT_EQ(layers_seen, 2);
}

// The host loops against the torch formula they replace.
TEST(LayerStatistics, RouterStatisticsEqualTheTorchFormula) {
  at::manual_seed(7);
  const at::Tensor scores = at::rand({257, 12}, at::kFloat) + 1e-3;  // [T, E]
  const at::Tensor probs = scores / scores.sum(-1, true).clamp_min(1e-20);
  const double entropy = -(probs * probs.clamp_min(1e-20).log()).sum(-1).mean().item<double>();
  const at::Tensor mean_score = scores.mean(0);

  for (const at::Tensor& input : {scores, scores.to(at::kDouble), scores.t().contiguous().t()}) {
    const RouterStatistics statistics = router_statistics(input);
    EXPECT_NEAR(statistics.entropy, entropy, 1e-5);
    ASSERT_EQ(statistics.mean_score.size(), 12u);
    for (int64_t e = 0; e < 12; ++e) {
      EXPECT_NEAR(statistics.mean_score[static_cast<size_t>(e)], mean_score[e].item<float>(), 1e-6);
    }
  }
  // Uniform scores have the largest entropy log(E); one expert taking each token has none.
  EXPECT_NEAR(router_statistics(at::ones({5, 8})).entropy, std::log(8.0), 1e-6);
  at::Tensor one_hot = at::zeros({5, 8});
  one_hot.select(1, 3).fill_(1.0);
  EXPECT_NEAR(router_statistics(one_hot).entropy, 0.0, 1e-6);
  EXPECT_TRUE(std::isnan(router_statistics(at::zeros({0, 8})).entropy));
  EXPECT_THROW(router_statistics(at::ones({8})), c10::Error);
}

TEST(LayerStatistics, CountNonfiniteOnEveryPath) {
  at::Tensor values = at::randn({64, 33});
  EXPECT_EQ(count_nonfinite(values), 0u);
  values[3][4] = std::numeric_limits<float>::quiet_NaN();
  values[10][0] = std::numeric_limits<float>::infinity();
  values[63][32] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(count_nonfinite(values), 3u);                    // fp32 host loop
  EXPECT_EQ(count_nonfinite(values.t()), 3u);                // non-contiguous: reduction path
  EXPECT_EQ(count_nonfinite(values.to(at::kBFloat16)), 3u);  // other dtypes: reduction path
  EXPECT_EQ(count_nonfinite(values.to(at::kDouble).abs()), 3u);
  // The host loop works in blocks of 64: values in the last partial block count too.
  at::Tensor ragged = at::randn({131});
  ragged[0] = std::numeric_limits<float>::infinity();
  ragged[129] = std::numeric_limits<float>::quiet_NaN();
  ragged[130] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(count_nonfinite(ragged), 3u);
  EXPECT_EQ(count_nonfinite(ragged.narrow(0, 1, 129)), 1u);  // a view at an offset
  // Finite values whose fp32 sum overflows are still finite.
  EXPECT_EQ(count_nonfinite(at::full({4}, 3e38f).to(at::kBFloat16)), 0u);
  EXPECT_EQ(count_nonfinite(at::full({4}, 3e38f)), 0u);
  EXPECT_EQ(count_nonfinite(at::Tensor()), 0u);
  EXPECT_EQ(count_nonfinite(at::empty({0, 4})), 0u);
}

}  // namespace
}  // namespace moescope::runtime
