#include "moescope/runtime/expert_optimizer_offload.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "moescope/recorder.h"
#include "moescope/runtime/state_archive.h"

namespace moescope::runtime {
namespace {

int64_t bytes_of(const at::Tensor& tensor) {
  return tensor.defined() ? tensor.nbytes() : 0;
}

/// Calls fn(state) with the Adam or AdamW state of `param` (nothing when it has none yet).
template <typename Fn>
void visit_state(torch::optim::Optimizer& optimizer, const at::Tensor& param, Fn&& fn) {
  auto& states = optimizer.state();
  const auto found = states.find(param.unsafeGetTensorImpl());
  if (found == states.end()) return;
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(found->second.get())) {
    fn(*adam);
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(found->second.get())) {
    fn(*adamw);
  } else {
    TORCH_CHECK(false, "ExpertOptimizerOffload: unexpected optimizer state type");
  }
}

/// Adam's or AdamW's options (torch::optim::AdamOptions / AdamWOptions) from `options`: the
/// two take the same settings.
template <typename AdamOptions>
AdamOptions adam_options(const ExpertOptimizerOptions& options) {
  return AdamOptions(options.lr)
      .betas(std::make_tuple(options.beta1, options.beta2))
      .eps(options.eps)
      .weight_decay(options.weight_decay)
      .amsgrad(options.amsgrad);
}

template <typename State>
int64_t state_bytes(const State& state) {
  return bytes_of(state.exp_avg()) + bytes_of(state.exp_avg_sq()) +
         bytes_of(state.max_exp_avg_sq());
}

}  // namespace

/// One local expert: its optimizer, the device views it updates when resident and the host
/// copies it updates when offloaded.
struct ExpertOptimizerOffload::Expert {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<at::Tensor> device_views;  // [num_parameters], param[g] on the device
  std::vector<at::Tensor> host_copies;   // [num_parameters] while offloaded, else empty
  bool offloaded = false;

  /// The tensors the optimizer currently updates (and keys its state by).
  const std::vector<at::Tensor>& optimizer_params() const {
    return optimizer->param_groups().front().params();
  }
};

ExpertOptimizerOffload::ExpertOptimizerOffload(std::vector<at::Tensor> expert_parameters,
                                               const ExpertOptimizerOptions& options)
    : parameters_(std::move(expert_parameters)), options_(options) {
  TORCH_CHECK(!parameters_.empty(), "ExpertOptimizerOffload: expert_parameters is empty");
  TORCH_CHECK(options.lr >= 0 && std::isfinite(options.lr),
              "ExpertOptimizerOffload: lr must be finite and >= 0, got ", options.lr);
  TORCH_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
              "ExpertOptimizerOffload: beta1 and beta2 must be in [0, 1), got ", options.beta1,
              " and ", options.beta2);
  TORCH_CHECK(options.eps >= 0, "ExpertOptimizerOffload: eps must be >= 0, got ", options.eps);
  TORCH_CHECK(options.weight_decay >= 0, "ExpertOptimizerOffload: weight_decay must be >= 0, got ",
              options.weight_decay);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& param = parameters_[i];
    TORCH_CHECK(param.defined() && param.dim() >= 2, "ExpertOptimizerOffload: expert_parameters[",
                i, "] must be a stacked [G, ...] tensor with at least 2 dims");
    TORCH_CHECK(param.is_floating_point(), "ExpertOptimizerOffload: expert_parameters[", i,
                "] must be floating point, got ", param.scalar_type());
    TORCH_CHECK(param.size(0) == parameters_[0].size(0),
                "ExpertOptimizerOffload: expert_parameters[", i, "] has ", param.size(0),
                " experts, expert_parameters[0] has ", parameters_[0].size(0));
    TORCH_CHECK(param.device() == parameters_[0].device(),
                "ExpertOptimizerOffload: expert_parameters[", i, "] is on ", param.device(),
                ", expert_parameters[0] on ", parameters_[0].device());
  }
  num_experts_ = parameters_[0].size(0);
  TORCH_CHECK(num_experts_ >= 1, "ExpertOptimizerOffload: the parameters hold no expert");

  experts_.reserve(static_cast<size_t>(num_experts_));
  for (int64_t g = 0; g < num_experts_; ++g) {
    auto expert = std::make_unique<Expert>();
    for (const at::Tensor& param : parameters_) {
      // detach(): the optimizer updates the shared storage in place, outside autograd.
      expert->device_views.push_back(param.detach().select(0, g));
    }
    if (options.kind == ExpertOptimizerKind::kAdam) {
      expert->optimizer = std::make_unique<torch::optim::Adam>(
          expert->device_views, adam_options<torch::optim::AdamOptions>(options));
    } else {
      expert->optimizer = std::make_unique<torch::optim::AdamW>(
          expert->device_views, adam_options<torch::optim::AdamWOptions>(options));
    }
    experts_.push_back(std::move(expert));
  }
}

ExpertOptimizerOffload::~ExpertOptimizerOffload() = default;

void ExpertOptimizerOffload::check_expert(int64_t expert, const char* what) const {
  TORCH_CHECK(expert >= 0 && expert < num_experts_, "ExpertOptimizerOffload::", what, ": expert ",
              expert, " is outside [0, ", num_experts_, ")");
}

void ExpertOptimizerOffload::step() {
  at::NoGradGuard no_grad;
  for (int64_t g = 0; g < num_experts_; ++g) {
    Expert& expert = *experts_[static_cast<size_t>(g)];
    auto& params = expert.optimizer->param_groups().front().params();
    for (size_t i = 0; i < parameters_.size(); ++i) {
      // Updating views of storage the model no longer uses would silently freeze the experts.
      TORCH_CHECK(expert.device_views[i].is_alias_of(parameters_[i]),
                  "ExpertOptimizerOffload::step: expert_parameters[", i,
                  "] got new storage after the offload was built (e.g. torch::nn::Module::load); "
                  "call load() after loading the weights, or copy weights in place");
      const at::Tensor& full_grad = parameters_[i].grad();
      if (!full_grad.defined()) {
        params[i].mutable_grad() = at::Tensor();  // Adam skips parameters without a gradient
        continue;
      }
      if (expert.offloaded) {
        // The weights may have changed on the device since the last step (checkpoint load,
        // migration): refresh the host copy, then hand the host the gradient slice.
        params[i].copy_(expert.device_views[i]);
        params[i].mutable_grad() = full_grad.select(0, g).to(params[i].device(),
                                                             /*non_blocking=*/false,
                                                             /*copy=*/true);
      } else {
        params[i].mutable_grad() = full_grad.select(0, g);
      }
    }
    expert.optimizer->step();
    for (size_t i = 0; i < parameters_.size(); ++i) {
      params[i].mutable_grad() = at::Tensor();  // do not keep gradient slices alive
      if (expert.offloaded && parameters_[i].grad().defined()) {
        expert.device_views[i].copy_(params[i], /*non_blocking=*/false);
      }
    }
    ++(expert.offloaded ? stats_.host_steps : stats_.device_steps);
  }
}

void ExpertOptimizerOffload::zero_grad() {
  for (at::Tensor& param : parameters_) param.mutable_grad() = at::Tensor();
}

void ExpertOptimizerOffload::set_lr(double lr) {
  TORCH_CHECK(lr >= 0 && std::isfinite(lr),
              "ExpertOptimizerOffload::set_lr: lr must be finite "
              "and >= 0, got ",
              lr);
  options_.lr = lr;
  for (auto& expert : experts_) {
    for (auto& group : expert->optimizer->param_groups()) group.options().set_lr(lr);
  }
}

int64_t ExpertOptimizerOffload::move_expert(Expert& expert, bool to_host) {
  if (expert.offloaded == to_host) return 0;
  const at::Device device = parameters_[0].device();
  const bool pinned = to_host && options_.pin_host_memory && device.is_cuda();
  // Host -> device from pinned memory is asynchronous; device -> host must finish before the
  // device memory is released, so it is synchronous.
  const bool non_blocking = !to_host && device.is_cuda();
  const auto move = [&](const at::Tensor& tensor) -> at::Tensor {
    if (!tensor.defined()) return tensor;
    if (!to_host) return tensor.to(device, non_blocking, /*copy=*/true);
    at::Tensor host =
        at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(pinned));
    host.copy_(tensor);
    return host;
  };

  at::NoGradGuard no_grad;
  auto& params = expert.optimizer->param_groups().front().params();
  auto& states = expert.optimizer->state();
  int64_t moved_bytes = 0;
  std::vector<at::Tensor> host_copies;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor old_param = params[i];
    const at::Tensor new_param = to_host ? move(expert.device_views[i]) : expert.device_views[i];
    if (to_host) host_copies.push_back(new_param);
    visit_state(*expert.optimizer, old_param, [&](auto& state) {
      state.exp_avg(move(state.exp_avg()));
      state.exp_avg_sq(move(state.exp_avg_sq()));
      state.max_exp_avg_sq(move(state.max_exp_avg_sq()));
      moved_bytes += state_bytes(state);
    });
    // The optimizer keys its state by the parameter's TensorImpl: re-key it to the new tensor.
    const auto found = states.find(old_param.unsafeGetTensorImpl());
    if (found != states.end()) {
      auto state = std::move(found->second);
      states.erase(found);
      states[new_param.unsafeGetTensorImpl()] = std::move(state);
    }
    params[i] = new_param;
  }
  expert.host_copies = std::move(host_copies);
  expert.offloaded = to_host;
  if (to_host) {
    ++stats_.offloads;
    stats_.bytes_to_host += moved_bytes;
  } else {
    ++stats_.prefetches;
    stats_.bytes_to_device += moved_bytes;
  }
  return moved_bytes;
}

void ExpertOptimizerOffload::offload_expert(int64_t expert) {
  check_expert(expert, "offload_expert");
  move_expert(*experts_[static_cast<size_t>(expert)], /*to_host=*/true);
}

void ExpertOptimizerOffload::prefetch_expert(int64_t expert) {
  check_expert(expert, "prefetch_expert");
  move_expert(*experts_[static_cast<size_t>(expert)], /*to_host=*/false);
}

OffloadDecision ExpertOptimizerOffload::update_from_predicted_load(
    std::span<const double> predicted_tokens_per_step) {
  TORCH_CHECK(static_cast<int64_t>(predicted_tokens_per_step.size()) == num_experts_,
              "ExpertOptimizerOffload::update_from_predicted_load: predicted_tokens_per_step has ",
              predicted_tokens_per_step.size(), " entries, expected one per local expert (",
              num_experts_, ")");
  for (size_t g = 0; g < predicted_tokens_per_step.size(); ++g) {
    TORCH_CHECK(std::isfinite(predicted_tokens_per_step[g]) && predicted_tokens_per_step[g] >= 0,
                "ExpertOptimizerOffload::update_from_predicted_load: predicted load of expert ", g,
                " must be finite and >= 0, got ", predicted_tokens_per_step[g]);
  }
  OffloadDecision decision;
  // Prefetch first: the device then briefly holds more, never a half-moved expert.
  for (int64_t g = 0; g < num_experts_; ++g) {
    const bool cold =
        predicted_tokens_per_step[static_cast<size_t>(g)] < options_.cold_load_threshold;
    if (!cold && is_offloaded(g)) {
      prefetch_expert(g);
      decision.prefetched.push_back(g);
    }
  }
  for (int64_t g = 0; g < num_experts_; ++g) {
    const bool cold =
        predicted_tokens_per_step[static_cast<size_t>(g)] < options_.cold_load_threshold;
    if (cold && !is_offloaded(g)) {
      offload_expert(g);
      decision.offloaded.push_back(g);
    }
  }
  return decision;
}

bool ExpertOptimizerOffload::is_offloaded(int64_t expert) const {
  check_expert(expert, "is_offloaded");
  return experts_[static_cast<size_t>(expert)]->offloaded;
}

std::vector<int64_t> ExpertOptimizerOffload::offloaded_experts() const {
  std::vector<int64_t> offloaded;
  for (int64_t g = 0; g < num_experts_; ++g) {
    if (experts_[static_cast<size_t>(g)]->offloaded) offloaded.push_back(g);
  }
  return offloaded;
}

int64_t ExpertOptimizerOffload::resident_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& expert : experts_) {
    if (expert->offloaded) continue;
    for (const at::Tensor& param : expert->optimizer_params()) {
      visit_state(*expert->optimizer, param,
                  [&](const auto& state) { bytes += state_bytes(state); });
    }
  }
  return bytes;
}

int64_t ExpertOptimizerOffload::offloaded_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& expert : experts_) {
    if (!expert->offloaded) continue;
    for (const at::Tensor& param : expert->optimizer_params()) {
      visit_state(*expert->optimizer, param,
                  [&](const auto& state) { bytes += state_bytes(state); });
    }
  }
  return bytes;
}

ExpertParamState ExpertOptimizerOffload::state(int64_t expert, int64_t parameter_index) const {
  check_expert(expert, "state");
  TORCH_CHECK(parameter_index >= 0 && parameter_index < num_parameters(),
              "ExpertOptimizerOffload::state: parameter_index ", parameter_index,
              " is outside [0, ", num_parameters(), ")");
  const Expert& entry = *experts_[static_cast<size_t>(expert)];
  ExpertParamState out;
  visit_state(*entry.optimizer, entry.optimizer_params()[static_cast<size_t>(parameter_index)],
              [&](const auto& state) {
                out.step = state.step();
                out.exp_avg = state.exp_avg();
                out.exp_avg_sq = state.exp_avg_sq();
                out.max_exp_avg_sq = state.max_exp_avg_sq();
              });
  return out;
}

void ExpertOptimizerOffload::record() const {
  if (!moescope_recording) return;
  // Interned per call: ids belong to one recording, and a recorder may restart.
  moescope_counter(moescope_intern("memory.optimizer_state_offloaded"),
                   static_cast<double>(offloaded_state_bytes()));
  moescope_counter(moescope_intern("memory.optimizer_state_expert_resident"),
                   static_cast<double>(resident_state_bytes()));
}

// Archive layout:
//   format                 "moescope.expert_optimizer_offload.v1"
//   kind                   "adam" | "adamw"
//   num_experts, num_parameters   int
//   parameter_shapes       [num_parameters, max dims + 1] int64: dims, then the sizes (-1 pad)
//   stats                  [6] int64, ExpertOffloadStats in field order
//   expert<g>/offloaded    bool
//   expert<g>/optimizer    torch::optim::Adam(W)::save of the expert's own optimizer
constexpr const char* kOffloadFormat = "moescope.expert_optimizer_offload.v1";

namespace {

const char* kind_name(ExpertOptimizerKind kind) {
  return kind == ExpertOptimizerKind::kAdam ? "adam" : "adamw";
}

at::Tensor shapes_of(const std::vector<at::Tensor>& parameters) {
  int64_t max_dims = 0;
  for (const at::Tensor& param : parameters) max_dims = std::max<int64_t>(max_dims, param.dim());
  at::Tensor shapes =
      at::full({static_cast<int64_t>(parameters.size()), max_dims + 1}, -1, at::kLong);
  for (size_t i = 0; i < parameters.size(); ++i) {
    shapes[static_cast<int64_t>(i)][0] = parameters[i].dim();
    for (int64_t d = 0; d < parameters[i].dim(); ++d) {
      shapes[static_cast<int64_t>(i)][d + 1] = parameters[i].size(d);
    }
  }
  return shapes;
}

}  // namespace

void ExpertOptimizerOffload::save(torch::serialize::OutputArchive& archive) const {
  archive.write("format", c10::IValue(std::string(kOffloadFormat)));
  archive.write("kind", c10::IValue(std::string(kind_name(options_.kind))));
  archive.write("num_experts", c10::IValue(num_experts_));
  archive.write("num_parameters", c10::IValue(num_parameters()));
  archive.write("parameter_shapes", shapes_of(parameters_));
  archive.write("stats",
                at::tensor(std::vector<int64_t>{stats_.offloads, stats_.prefetches,
                                                stats_.bytes_to_host, stats_.bytes_to_device,
                                                stats_.host_steps, stats_.device_steps},
                           at::kLong));
  for (int64_t g = 0; g < num_experts_; ++g) {
    const Expert& expert = *experts_[static_cast<size_t>(g)];
    torch::serialize::OutputArchive entry, optimizer;
    expert.optimizer->save(optimizer);
    entry.write("offloaded", c10::IValue(expert.offloaded));
    entry.write("optimizer", optimizer);
    archive.write("expert" + std::to_string(g), entry);
  }
}

void ExpertOptimizerOffload::load(torch::serialize::InputArchive& archive,
                                  const std::string& what) {
  const std::string format = read_archive_value(archive, "format", what).toStringRef();
  TORCH_CHECK(format == kOffloadFormat, what, ": format ", format, ", expected ", kOffloadFormat);
  const std::string kind = read_archive_value(archive, "kind", what).toStringRef();
  TORCH_CHECK(kind == kind_name(options_.kind), what, ": saved by an ", kind,
              " expert optimizer, this one is ", kind_name(options_.kind));
  const at::Tensor saved_shapes =
      read_archive_tensor(archive, "parameter_shapes", what).to(at::kCPU);
  TORCH_CHECK(read_archive_value(archive, "num_experts", what).toInt() == num_experts_ &&
                  read_archive_value(archive, "num_parameters", what).toInt() == num_parameters() &&
                  saved_shapes.equal(shapes_of(parameters_)),
              what, ": saved for stacked parameters of shapes ", saved_shapes,
              ", this offload's are ", shapes_of(parameters_));
  const at::Tensor stats = read_archive_tensor(archive, "stats", what).to(at::kCPU, at::kLong);
  TORCH_CHECK(stats.numel() == 6, what, ": stats must hold 6 counters, got ", stats.numel());
  // Read every expert's entry before changing anything.
  std::vector<torch::serialize::InputArchive> optimizers(static_cast<size_t>(num_experts_));
  std::vector<bool> offloaded(static_cast<size_t>(num_experts_));
  for (int64_t g = 0; g < num_experts_; ++g) {
    const std::string key = "expert" + std::to_string(g);
    torch::serialize::InputArchive entry = read_archive_nested(archive, key, what);
    offloaded[static_cast<size_t>(g)] =
        read_archive_value(entry, "offloaded", what + "/" + key).toBool();
    optimizers[static_cast<size_t>(g)] = read_archive_nested(entry, "optimizer", what + "/" + key);
  }
  for (int64_t g = 0; g < num_experts_; ++g) {
    Expert& expert = *experts_[static_cast<size_t>(g)];
    // The saved state is keyed to the optimizer's parameters in order: load it while the
    // expert's optimizer updates the device views, then move it where it was at the save.
    move_expert(expert, /*to_host=*/false);
    expert.optimizer->state().clear();
    // Loading the model's weights (torch::nn::Module::load) may have given the stacked
    // parameters new storage: take fresh views of them.
    auto& params = expert.optimizer->param_groups().front().params();
    for (size_t i = 0; i < parameters_.size(); ++i) {
      expert.device_views[i] = parameters_[i].detach().select(0, g);
      params[i] = expert.device_views[i];
    }
    expert.optimizer->load(optimizers[static_cast<size_t>(g)]);
    // A checkpoint loaded onto another device (or saved while the expert was offloaded and
    // loaded with the archive's default device) may hold the state elsewhere: bring it to the
    // weights' device, as a resident expert keeps it.
    for (const at::Tensor& param : expert.optimizer_params()) {
      visit_state(*expert.optimizer, param, [&](auto& state) {
        const auto to_param = [&](const at::Tensor& tensor) {
          return tensor.defined() ? tensor.to(param.device()) : tensor;
        };
        state.exp_avg(to_param(state.exp_avg()));
        state.exp_avg_sq(to_param(state.exp_avg_sq()));
        state.max_exp_avg_sq(to_param(state.max_exp_avg_sq()));
      });
    }
    if (offloaded[static_cast<size_t>(g)]) move_expert(expert, /*to_host=*/true);
  }
  const int64_t* counters = stats.contiguous().data_ptr<int64_t>();
  stats_ = {counters[0], counters[1], counters[2], counters[3], counters[4], counters[5]};
}

}  // namespace moescope::runtime
