// moe_ep_worker's "rebalance_checkpoint" mode: an ExpertRebalancer saved after it moved experts
// and loaded into a fresh one continues identically. Rank r trains a skewed layer (redundant
// slots, Adam) until a decision is applied, saves layer + Adam + rebalancer into one archive,
// loads it into a freshly built layer + Adam + rebalancer (initial placement), then trains both
// on the same batches until the next decision. Lines:
//   "SAVED rank=... step=... moved=... same_placement=... same_forecast=... output_diff=..."
//   "NEXT rank=... step=... same_decisions=... same_placement=... output_diff=... applied=..."
//   "MISMATCH rank=... message=..."  (loading into a layer with another layer index)
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <iostream>
#include <memory>
#include <sstream>

#include "moescope/runtime/expert_rebalancer.h"
#include "worker_modes.h"

using namespace moescope::runtime;

namespace {

// Wall time would make gain > cost depend on the machine: every step "takes" this long.
constexpr double kStepSeconds = 0.05;

// One layer with its optimizer and rebalancer, built the same way on every call (same seed):
// a fresh one holds the initial placement.
struct Trainer {
  MoELayer layer{nullptr};
  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<ExpertRebalancer> rebalancer;

  Trainer(const MoEConfig& config, const ExpertParallelGroup& group) {
    torch::manual_seed(1234);
    layer = MoELayer(config, group);
    layer->to(at::kDouble);
    layer->router->gate_weight.requires_grad_(false);
    adam = std::make_unique<torch::optim::Adam>(
        std::vector<at::Tensor>{layer->experts->w_gate_up, layer->experts->w_down},
        torch::optim::AdamOptions(1e-2));
    RebalancerOptions options;
    options.warmup_steps = 2;
    options.interval_steps = 3;
    options.imbalance_threshold = 1.05;
    // The earlier rule: these check what a move does (and repeat decisions exactly), not whether
    // it pays; the cost rule's measured times would make the moves depend on the machine's speed.
    options.rule = RebalanceRule::kImbalanceGain;
    rebalancer = std::make_unique<ExpertRebalancer>(
        std::vector<MoELayer>{layer}, options, std::vector<torch::optim::Optimizer*>{adam.get()});
  }

  std::vector<RebalanceDecision> step(int step_index, int64_t rank) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step_index + rank);
    const at::Tensor input = at::randn({48, 16}, generator, at::kDouble);
    const at::Tensor out_grad = at::randn({48, 16}, generator, at::kDouble);
    adam->zero_grad();
    const MoEOutput out = layer->forward(input);
    (out.output * out_grad).sum().backward();
    layer->sync_replica_gradients();
    adam->step();
    return rebalancer->after_step(step_index, kStepSeconds);
  }

  at::Tensor output_on_probe(int64_t rank) {
    at::NoGradGuard no_grad;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(777 + rank);
    return layer->forward(at::randn({32, 16}, generator, at::kDouble)).output;
  }

  std::string save() const {
    torch::serialize::OutputArchive archive, layer_archive, adam_archive, rebalancer_archive;
    layer->save(layer_archive);
    adam->save(adam_archive);
    rebalancer->save(rebalancer_archive);
    archive.write("layer", layer_archive);
    archive.write("adam", adam_archive);
    archive.write("rebalancer", rebalancer_archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    return bytes.str();
  }

  void load(const std::string& bytes) {
    std::istringstream stream(bytes);
    torch::serialize::InputArchive archive, layer_archive, adam_archive, rebalancer_archive;
    archive.load_from(stream);
    archive.read("layer", layer_archive);
    archive.read("adam", adam_archive);
    archive.read("rebalancer", rebalancer_archive);
    layer->load(layer_archive);
    adam->load(adam_archive);
    rebalancer->load(rebalancer_archive, "test archive");
  }
};

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

bool same_decisions(const std::vector<RebalanceDecision>& a,
                    const std::vector<RebalanceDecision>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].imbalance_before != b[i].imbalance_before ||
        a[i].imbalance_after != b[i].imbalance_after || a[i].applied != b[i].applied ||
        a[i].bytes_to_move != b[i].bytes_to_move) {
      return false;
    }
  }
  return true;
}

}  // namespace

int run_rebalance_checkpoint(const ExpertParallelGroup& group) {
  const int64_t rank = group.rank();
  const MoEConfig config = hot_expert_config(group);
  Trainer saved(config, group);
  const std::vector<int32_t> initial = saved.layer->expert_slots().placement().physical_to_logical;
  int step = 0;
  bool applied = false;
  for (; step < 12 && !applied; ++step) {
    for (const RebalanceDecision& decision : saved.step(step, rank)) applied |= decision.applied;
  }
  const std::string bytes = saved.save();

  Trainer restored(config, group);
  restored.load(bytes);
  const moescope::balancer::ExpertPlacement& placement = saved.layer->expert_slots().placement();
  // Forward is collective: the same order on every rank.
  const at::Tensor saved_output = saved.output_on_probe(rank);
  const at::Tensor restored_output = restored.output_on_probe(rank);
  std::cout << "SAVED rank=" << rank << " step=" << step - 1
            << " moved=" << (placement.physical_to_logical != initial) << " same_placement="
            << (restored.layer->expert_slots().placement().physical_to_logical ==
                placement.physical_to_logical)
            << " same_forecast="
            << (restored.rebalancer->forecaster().predict(0) ==
                saved.rebalancer->forecaster().predict(0))
            << " output_diff=" << max_diff(restored_output, saved_output) << std::endl;

  // Both see the same batches up to and including the next decision.
  bool decided = false, same = true;
  int applied_next = 0;
  for (; step < 24 && !decided; ++step) {
    const auto expected = saved.step(step, rank);
    const auto got = restored.step(step, rank);
    same = same && same_decisions(expected, got);
    decided = !expected.empty();
    for (const RebalanceDecision& decision : expected) applied_next += decision.applied;
  }
  const at::Tensor saved_next = saved.output_on_probe(rank);
  const at::Tensor restored_next = restored.output_on_probe(rank);
  std::cout << "NEXT rank=" << rank << " step=" << step - 1 << " decided=" << decided
            << " same_decisions=" << same << " same_placement="
            << (restored.layer->expert_slots().placement().physical_to_logical ==
                saved.layer->expert_slots().placement().physical_to_logical)
            << " output_diff=" << max_diff(restored_next, saved_next) << " applied=" << applied_next
            << std::endl;

  MoEConfig other = config;
  other.layer_index = 5;
  Trainer mismatched(other, group);
  try {
    mismatched.load(bytes);
    std::cout << "MISMATCH rank=" << rank << " message=(none)" << std::endl;
  } catch (const c10::Error& error) {
    std::cout << "MISMATCH rank=" << rank << " message=" << error.what_without_backtrace()
              << std::endl;
  }
  return 0;
}
