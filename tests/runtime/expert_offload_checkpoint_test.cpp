// ExpertOptimizerOffload in checkpoints: the state of every expert, resident or offloaded,
// saved and loaded into a fresh offload, continues bit for bit; mismatches are refused by name.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <string>
#include <vector>

#include "moescope/runtime/expert_optimizer_offload.h"

namespace moescope::runtime {
namespace {

constexpr int64_t kExperts = 4;

ExpertOptimizerOptions adamw_options() {
  ExpertOptimizerOptions options;
  options.kind = ExpertOptimizerKind::kAdamW;
  options.lr = 0.01;
  options.weight_decay = 0.1;
  options.amsgrad = true;  // the third moment travels too
  return options;
}

// Step `step`'s gradients, the same for every copy of the parameters.
void set_gradients(std::vector<at::Tensor>& params, int step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  for (at::Tensor& param : params) {
    param.mutable_grad() = at::randn(param.sizes(), generator, at::kFloat);
  }
}

std::string save_to_bytes(const ExpertOptimizerOffload& offload) {
  torch::serialize::OutputArchive archive;
  offload.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void load_from_bytes(ExpertOptimizerOffload& offload, const std::string& bytes) {
  std::istringstream stream(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(stream);
  offload.load(archive, "test archive");
}

void expect_same_state(const ExpertOptimizerOffload& a, const ExpertOptimizerOffload& b) {
  for (int64_t g = 0; g < kExperts; ++g) {
    EXPECT_EQ(a.is_offloaded(g), b.is_offloaded(g)) << "expert " << g;
    for (int64_t i = 0; i < a.num_parameters(); ++i) {
      const ExpertParamState x = a.state(g, i), y = b.state(g, i);
      EXPECT_EQ(x.step, y.step) << "expert " << g << " parameter " << i;
      EXPECT_TRUE(at::equal(x.exp_avg, y.exp_avg)) << "expert " << g << " parameter " << i;
      EXPECT_TRUE(at::equal(x.exp_avg_sq, y.exp_avg_sq)) << "expert " << g << " parameter " << i;
      EXPECT_TRUE(at::equal(x.max_exp_avg_sq, y.max_exp_avg_sq)) << "expert " << g;
      EXPECT_EQ(x.exp_avg.device(), y.exp_avg.device()) << "expert " << g;
    }
  }
}

TEST(ExpertOffloadCheckpoint, RestoredOffloadContinuesBitForBitWithTheSameExpertsOnTheHost) {
  torch::manual_seed(3);
  std::vector<at::Tensor> params = {at::randn({kExperts, 8, 16}), at::randn({kExperts, 16, 8})};
  ExpertOptimizerOffload saved(params, adamw_options());
  for (int step = 0; step < 3; ++step) {
    if (step == 1) saved.update_from_predicted_load(std::vector<double>{5, 0, 5, 0});
    set_gradients(params, step);
    saved.step();
    saved.zero_grad();
  }
  ASSERT_EQ(saved.offloaded_experts(), (std::vector<int64_t>{1, 3}));
  const std::string bytes = save_to_bytes(saved);

  // A fresh model: the weights come from the checkpoint as torch::nn::Module::load does it,
  // into new storage (set_), after the offload took its views.
  std::vector<at::Tensor> fresh = {at::zeros({kExperts, 8, 16}), at::zeros({kExperts, 16, 8})};
  ExpertOptimizerOffload restored(fresh, adamw_options());
  for (size_t i = 0; i < fresh.size(); ++i) fresh[i].set_(params[i].clone());
  load_from_bytes(restored, bytes);
  expect_same_state(saved, restored);
  EXPECT_EQ(restored.offloaded_state_bytes(), saved.offloaded_state_bytes());
  EXPECT_EQ(restored.stats().offloads, saved.stats().offloads);
  EXPECT_EQ(restored.stats().host_steps, saved.stats().host_steps);

  // The same further steps (with a prefetch and an offload on the way) give the same weights.
  for (int step = 3; step < 6; ++step) {
    if (step == 4) {
      saved.update_from_predicted_load(std::vector<double>{0, 5, 5, 0});
      restored.update_from_predicted_load(std::vector<double>{0, 5, 5, 0});
    }
    set_gradients(params, step);
    set_gradients(fresh, step);
    saved.step();
    restored.step();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(at::equal(params[i], fresh[i])) << "step " << step << " parameter " << i;
    }
  }
  expect_same_state(saved, restored);
}

TEST(ExpertOffloadCheckpoint, RefusesAnotherShapeAndAMissingEntryByName) {
  std::vector<at::Tensor> params = {at::randn({kExperts, 4, 4})};
  ExpertOptimizerOffload saved(params, adamw_options());
  set_gradients(params, 0);
  saved.step();
  const std::string bytes = save_to_bytes(saved);
  const auto expect_error = [&](ExpertOptimizerOffload& target, const std::string& archive_bytes,
                                const std::string& needle) {
    try {
      load_from_bytes(target, archive_bytes);
      ADD_FAILURE() << "no error, expected one naming " << needle;
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  ExpertOptimizerOffload other_shape({at::randn({kExperts, 4, 5})}, adamw_options());
  expect_error(other_shape, bytes, "test archive: saved for stacked parameters of shapes");
  ExpertOptimizerOptions adam = adamw_options();
  adam.kind = ExpertOptimizerKind::kAdam;
  ExpertOptimizerOffload other_kind({at::randn({kExperts, 4, 4})}, adam);
  expect_error(other_kind, bytes, "saved by an adamw expert optimizer, this one is adam");
  torch::serialize::OutputArchive empty;
  empty.write("unrelated", c10::IValue(int64_t{1}));
  std::ostringstream empty_bytes;
  empty.save_to(empty_bytes);
  ExpertOptimizerOffload target({at::randn({kExperts, 4, 4})}, adamw_options());
  expect_error(target, empty_bytes.str(), "test archive: no entry format");
}

// Without load(), an offload whose parameters got new storage would update memory nobody reads.
TEST(ExpertOffloadCheckpoint, StepRefusesViewsOfReplacedStorage) {
  std::vector<at::Tensor> params = {at::randn({kExperts, 4, 4})};
  ExpertOptimizerOffload offload(params, adamw_options());
  params[0].set_(params[0].clone());
  set_gradients(params, 0);
  try {
    offload.step();
    ADD_FAILURE() << "stepped on stale views";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("got new storage"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace moescope::runtime
