// sync_count_check: recording a moescope trace adds no host synchronization to a MoELayer
// training step on a CUDA GPU, and costs little time.
//   1. synchronizations: with CUDA's sync debug mode on (what
//   torch.cuda.set_sync_debug_mode("warn")
//      sets: every synchronizing CUDA operation torch runs, i.e. a blocking copy, .item(), a
//      stream, event or device synchronize, raises a warning), a warning handler counts them per
//      training step (two bf16 MoE layers: forward, backward, aux-loss-free bias update). A
//      recorded step must synchronize exactly as often as a plain one.
//   2. the trace: the recorded steps' expert loads and layer statistics are read back; each
//      (layer, step) is there once, tagged with its own step, with the counts the forward
//      returned.
//   3. time: recorded / plain step time (median of interleaved blocks), printed, not judged.
// Exit status 1 when a check fails, 77 with a "no CUDA device" line when none is visible
// (no_cuda_device.h).
// Built by tests/device/CMakeLists.txt (target sync_count_check, in the bundle prepare.sh makes);
// run: <build>/bin/sync_count_check, or part `sync` of tests/device/run.sh.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "moescope/recorder.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/trace/trace_reader.h"
#include "no_cuda_device.h"

using namespace moescope::runtime;

namespace {

constexpr int64_t kTokens = 8192, kHidden = 2048, kFfn = 1024, kExperts = 32, kTopK = 4;

// Counts the warnings of the sync debug mode; passes every other warning on.
class SyncWarningCounter : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("called a synchronizing CUDA operation") != std::string::npos) {
      count.fetch_add(1);
    } else {
      c10::WarningHandler::process(warning);
    }
  }
  std::atomic<int64_t> count{0};
};

struct Model {
  std::vector<MoELayer> layers;
  at::Tensor input, out_grad;
};

Model make_model() {
  Model model;
  for (int64_t index = 0; index < 2; ++index) {
    MoEConfig config;
    config.hidden_size = kHidden;
    config.ffn_hidden_size = kFfn;
    config.num_experts = kExperts;
    config.top_k = kTopK;
    config.layer_index = index;
    config.aux_loss_coeff = 0.01;
    config.z_loss_coeff = 0.001;
    config.enable_expert_bias = true;
    config.capacity_factor = 1.25;
    torch::manual_seed(static_cast<uint64_t>(index + 1));
    MoELayer layer(config);
    layer->to(at::kCUDA);
    layer->experts->to(at::kBFloat16);  // the router stays fp32
    model.layers.push_back(layer);
  }
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  model.input = at::randn({kTokens, kHidden}, options);
  model.out_grad = at::randn({kTokens, kHidden}, options);
  return model;
}

// One training step; returns each layer's tokens per expert [E] (on the device).
std::vector<at::Tensor> train_step(Model& model, int64_t step) {
  set_training_step(step);
  at::Tensor hidden = model.input.detach().requires_grad_(true);
  at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
  std::vector<at::Tensor> tokens_per_expert;
  for (MoELayer& layer : model.layers) {
    layer->zero_grad();
    MoEOutput out = layer->forward(hidden);
    loss = loss + out.aux_loss.to(at::kFloat);
    hidden = out.output;
    tokens_per_expert.push_back(out.tokens_per_expert);
  }
  loss = loss + (hidden * model.out_grad).sum().to(at::kFloat);
  loss.backward();
  for (MoELayer& layer : model.layers) layer->update_expert_bias();
  return tokens_per_expert;
}

// Synchronizations of one training step (the debug mode is on only inside).
int64_t count_syncs(Model& model, int64_t step, std::vector<at::Tensor>* tokens_per_expert) {
  torch::cuda::synchronize();
  SyncWarningCounter counter;
  {
    const c10::WarningUtils::WarningHandlerGuard guard(&counter);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    std::vector<at::Tensor> counts = train_step(model, step);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    if (tokens_per_expert != nullptr) *tokens_per_expert = std::move(counts);
  }
  torch::cuda::synchronize();
  return counter.count.load();
}

double median_step_ms(Model& model, int64_t first_step, int steps) {
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    train_step(model, first_step + s);
    torch::cuda::synchronize();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void drain(Model& model) {
  for (MoELayer& layer : model.layers) layer->trace_statistics().drain();
}

// Expert loads (scope local) and layer-stats steps per (layer, step) in the trace at `path`.
struct TraceContent {
  std::map<std::pair<int64_t, uint32_t>, std::vector<std::vector<uint32_t>>> local_loads;
  std::map<std::pair<int64_t, uint32_t>, int> layer_stats;
  bool errors = false;
};

TraceContent read_trace(const std::string& path) {
  TraceContent content;
  moescope::trace::TraceReader reader;
  if (!reader.open(path)) {
    content.errors = true;
    return content;
  }
  moescope::trace::Chunk chunk;
  while (reader.next_chunk(chunk)) {
    for (const moescope::trace::RecordView record : chunk) {
      if (record.kind() == moescope::trace::RecordKind::kExpertLoad) {
        const auto load = record.as<moescope::trace::ExpertLoadRecord>();
        if (load.scope != MOESCOPE_EXPERTS_LOCAL) continue;
        std::vector<uint32_t> counts(load.num_experts);
        std::memcpy(counts.data(), record.tail<moescope::trace::ExpertLoadRecord>(),
                    counts.size() * sizeof(uint32_t));
        content.local_loads[{load.step, load.layer}].push_back(counts);
      } else if (record.kind() == moescope::trace::RecordKind::kLayerStats) {
        const auto stats = record.as<moescope::trace::LayerStatsRecord>();
        ++content.layer_stats[{stats.step, stats.layer}];
      }
    }
  }
  content.errors = !reader.errors().empty();
  return content;
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    return moescope::device_checks::report_no_cuda_device("sync_count_check",
                                                          "torch::cuda::is_available() is false");
  }
  Model model = make_model();
  for (int64_t step = 0; step < 3; ++step) train_step(model, step);  // warm-up (allocator, cuBLAS)
  bool ok = true;

  // 1. synchronizations per step, plain then recorded.
  constexpr int kCountedSteps = 3;
  std::vector<int64_t> plain, recorded;
  for (int s = 0; s < kCountedSteps; ++s) plain.push_back(count_syncs(model, 10 + s, nullptr));
  const std::string path = "/tmp/sync_count_check.moetrace";
  if (moescope_recorder_start(path.c_str(), nullptr) != 0) {
    std::printf("sync_count_check: FAIL, cannot start a recorder at %s\n", path.c_str());
    return 1;
  }
  std::map<int64_t, std::vector<at::Tensor>> counts_of_step;
  for (int s = 0; s < kCountedSteps; ++s) {
    recorded.push_back(count_syncs(model, 20 + s, &counts_of_step[20 + s]));
  }
  drain(model);
  moescope_recorder_stop();
  std::printf("synchronizations per training step (2 layers: forward, backward, bias update)\n");
  for (int s = 0; s < kCountedSteps; ++s) {
    const bool same = recorded[s] == plain[0] && plain[s] == plain[0];
    std::printf("  step %d: plain %lld, recorded %lld  %s\n", s, static_cast<long long>(plain[s]),
                static_cast<long long>(recorded[s]), same ? "ok" : "FAIL");
    ok = ok && same;
  }
  ok = ok && plain[0] > 0;  // the runtime's own reads (split sizes, NaN check): counting works

  // 2. the recorded steps' statistics in the trace, each (layer, step) once, with its counts.
  const TraceContent trace = read_trace(path);
  std::remove(path.c_str());
  bool trace_ok = !trace.errors;
  for (const auto& [step, counts] : counts_of_step) {
    for (size_t layer = 0; layer < counts.size(); ++layer) {
      const std::pair<int64_t, uint32_t> key{step, static_cast<uint32_t>(layer)};
      const at::Tensor expected = counts[layer].to(at::kCPU, at::kLong).contiguous();
      const auto loads = trace.local_loads.find(key);
      bool layer_ok = loads != trace.local_loads.end() && loads->second.size() == 1 &&
                      trace.layer_stats.count(key) && trace.layer_stats.at(key) == 1;
      for (int64_t e = 0; layer_ok && e < expected.numel(); ++e) {
        layer_ok = loads->second[0][static_cast<size_t>(e)] ==
                   static_cast<uint32_t>(expected.data_ptr<int64_t>()[e]);
      }
      if (!layer_ok) {
        std::printf("  trace: layer %zu step %lld missing, repeated or wrong\n", layer,
                    static_cast<long long>(step));
      }
      trace_ok = trace_ok && layer_ok;
    }
  }
  std::printf("trace: expert loads and layer statistics of the recorded steps %s\n",
              trace_ok ? "ok" : "FAIL");
  ok = ok && trace_ok;

  // 3. step time, plain and recorded blocks interleaved.
  constexpr int kPairs = 3, kBlockSteps = 10;
  std::vector<double> plain_ms, recorded_ms;
  int64_t step = 100;
  for (int pair = 0; pair < kPairs; ++pair) {
    plain_ms.push_back(median_step_ms(model, step, kBlockSteps));
    step += kBlockSteps;
    moescope_recorder_start(path.c_str(), nullptr);
    recorded_ms.push_back(median_step_ms(model, step, kBlockSteps));
    drain(model);
    moescope_recorder_stop();
    step += kBlockSteps;
  }
  std::remove(path.c_str());
  std::sort(plain_ms.begin(), plain_ms.end());
  std::sort(recorded_ms.begin(), recorded_ms.end());
  const double plain_median = plain_ms[kPairs / 2], recorded_median = recorded_ms[kPairs / 2];
  std::printf(
      "step time (T=%lld H=%lld F=%lld E=%lld k=%lld bf16, 2 layers): plain %.3f ms, recorded "
      "%.3f ms, recorded/plain %.3f\n",
      static_cast<long long>(kTokens), static_cast<long long>(kHidden),
      static_cast<long long>(kFfn), static_cast<long long>(kExperts), static_cast<long long>(kTopK),
      plain_median, recorded_median, recorded_median / plain_median);
  std::printf("sync_count_check: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
