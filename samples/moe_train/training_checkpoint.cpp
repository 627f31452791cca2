// moe_train's checkpoints: one torch archive per rank holding the model, the AdamW state, the
// step to resume at, the setup's signature and, when the run has them, the rebalancer's and the
// cold-expert offload's state.
#include "training_checkpoint.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <sstream>

namespace moe_train {
namespace {

constexpr const char* kRebalancerEntry = "expert_rebalancer";
constexpr const char* kOffloadEntry = "expert_offload";

// A checkpoint entry must be there exactly when this run has the option (`flag`) that writes
// and reads it: `missing` / `present` name what the entry holds for either message, and
// `if_ignored` says what would go wrong reading the checkpoint without the option.
void check_entry_matches_run(const std::string& path, const char* entry, bool present_in_file,
                             bool run_has_it, const char* missing, const char* present,
                             const char* flag, const char* if_ignored) {
  TORCH_CHECK(present_in_file || !run_has_it, "moe_train: checkpoint ", path, " has no ", missing,
              " (entry ", entry, "): it was written without ", flag,
              " (or by an older moe_train); resume it without ", flag);
  TORCH_CHECK(!present_in_file || run_has_it, "moe_train: checkpoint ", path, " holds ", present,
              " (entry ", entry, "): resume it with ", flag, if_ignored);
}

}  // namespace

std::string checkpoint_path_for_rank(const std::string& path, const LaunchEnvironment& env) {
  return env.world_size == 1 ? path : path + ".rank" + std::to_string(env.rank);
}

std::string checkpoint_signature(const TrainOptions& options, const LaunchEnvironment& env) {
  std::ostringstream signature;
  signature << "layers=" << options.layers << " hidden=" << options.hidden
            << " heads=" << options.heads << " ffn_hidden=" << options.ffn_hidden
            << " experts=" << options.experts << " seq_len=" << options.seq_len
            << " balance=" << balance_mode_name(options.balance) << " rank=" << env.rank
            << " world_size=" << env.world_size;
  return signature.str();
}

void save_checkpoint(const std::string& path, int64_t next_step, const std::string& signature,
                     MoETransformer& model, torch::optim::AdamW& optimizer,
                     const CheckpointExtras& extras) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optimizer_archive;
  model->save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("next_step", c10::IValue(next_step));
  archive.write("signature", c10::IValue(signature));
  if (extras.rebalancer != nullptr) {
    torch::serialize::OutputArchive rebalancer_archive;
    extras.rebalancer->save(rebalancer_archive);
    archive.write(kRebalancerEntry, rebalancer_archive);
  }
  if (extras.offload != nullptr) {
    torch::serialize::OutputArchive offload_archive;
    extras.offload->save(offload_archive);
    archive.write(kOffloadEntry, offload_archive);
  }
  const std::string temporary = path + ".tmp";
  archive.save_to(temporary);
  std::filesystem::rename(temporary, path);  // a crash mid-save keeps the previous checkpoint
}

int64_t load_checkpoint(const std::string& path, const std::string& signature,
                        const c10::Device& device, MoETransformer& model,
                        torch::optim::AdamW& optimizer, const CheckpointExtras& extras) {
  TORCH_CHECK(std::filesystem::exists(path), "moe_train: --resume: checkpoint ", path,
              " does not exist");
  torch::serialize::InputArchive archive;
  archive.load_from(path, device);
  c10::IValue saved_signature;
  archive.read("signature", saved_signature);
  TORCH_CHECK(saved_signature.toStringRef() == signature, "moe_train: checkpoint ", path,
              " was written by a different setup (", saved_signature.toStringRef(),
              ") than this run (", signature, ")");
  // The expert weights (and their AdamW state) are saved per slot: read under another
  // placement they would land in the wrong experts, so the rebalancer's entry must be there
  // exactly when this run rebalances. Checkpoints of older moe_train builds have neither entry.
  torch::serialize::InputArchive rebalancer_archive, offload_archive;
  const bool has_rebalancer = archive.try_read(kRebalancerEntry, rebalancer_archive);
  const bool has_offload = archive.try_read(kOffloadEntry, offload_archive);
  check_entry_matches_run(path, kRebalancerEntry, has_rebalancer, extras.rebalancer != nullptr,
                          "expert placement", "a rebalanced expert placement", "--rebalance-every",
                          ", or its experts would be read into the wrong slots");
  check_entry_matches_run(path, kOffloadEntry, has_offload, extras.offload != nullptr,
                          "offloaded experts' optimizer state",
                          "the routed experts' optimizer state apart", "--offload-cold-experts",
                          "");
  torch::serialize::InputArchive model_archive, optimizer_archive;
  archive.read("model", model_archive);
  archive.read("optimizer", optimizer_archive);
  model->load(model_archive);
  optimizer.load(optimizer_archive);
  if (extras.rebalancer != nullptr) {
    extras.rebalancer->load(rebalancer_archive,
                            "moe_train: checkpoint " + path + ": " + kRebalancerEntry);
  }
  if (extras.offload != nullptr) {
    extras.offload->load(offload_archive, "moe_train: checkpoint " + path + ": " + kOffloadEntry);
  }
  c10::IValue next_step;
  archive.read("next_step", next_step);
  return next_step.toInt();
}

}  // namespace moe_train
