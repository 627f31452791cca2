// The runtime registered with PyTorch's dispatcher, for the Python package moescope.runtime
// (profiler/python/moescope/runtime). Loaded with torch.ops.load_library, it adds:
//
//   torch.classes.moescope.MoELayer(config_text, process_group?, backend_device)
//       one moescope::runtime::MoELayer (its state: placement, expert-parallel group, bias
//       bookkeeping, trace statistics); its tensors are owned by the Python nn.Module
//   torch.ops.moescope.moe_layer_forward(layer, hidden, tensors, training)
//       -> (output, aux_loss, tokens_per_expert, num_dropped, num_received_rows)
//       CompositeImplicitAutograd: autograd records the runtime's own ops and custom Functions,
//       so gradients reach the Python nn.Parameters passed in `tensors`
//   torch.classes.moescope.ExpertRebalancer(options)
//       moescope::runtime::ExpertRebalancer over MoELayers, with the optimizer state of a Python
//       optimizer moved as extra per-slot tensors
//   torch.ops.moescope.set_training_step(step)
//   torch.ops.moescope.moe_config_text(text), torch.ops.moescope.rebalancer_option_defaults()
//       the C++ side's fields and defaults, which the Python declarations are checked against
//
// Parameters stay Python's: every forward binds the tensors the module holds now (so
// module.to(), load_state_dict(assign=True) and optimizers all see one tensor per parameter)
// before the C++ layer runs.
#include <torch/custom_class.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moe_config_text.h"
#include "moescope/runtime/expert_rebalancer.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/runtime/moe_layer.h"

namespace moescope::runtime::python {
namespace {

c10::DeviceType backend_device_type(const std::string& device) {
  TORCH_CHECK(device == "cpu" || device == "cuda",
              "moescope MoELayer: backend_device must be 'cpu' or 'cuda', got '", device, "'");
  return device == "cpu" ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
}

}  // namespace

/// One MoELayer and the table of its tensors in the order the Python module passes them:
/// parameters (gate_weight, w_gate_up, w_down[, shared_w_gate_up, shared_w_down]) then buffers
/// (expert_bias, logit_skew, accumulated_load).
class LayerHolder : public torch::CustomClassHolder {
 public:
  LayerHolder(const std::string& config_text,
              const std::optional<c10::intrusive_ptr<c10d::ProcessGroup>>& process_group,
              const std::string& backend_device) {
    ExpertParallelGroup group;
    if (process_group.has_value() && *process_group) {
      group.backend = (*process_group)->getBackend(backend_device_type(backend_device));
    }
    layer = MoELayer(parse_moe_config_text(config_text), group);
    parameter_slots_ = {{"gate_weight", &layer->router->gate_weight},
                        {"w_gate_up", &layer->experts->w_gate_up},
                        {"w_down", &layer->experts->w_down}};
    if (layer->shared_experts) {
      parameter_slots_.push_back({"shared_w_gate_up", &layer->shared_experts->w_gate_up});
      parameter_slots_.push_back({"shared_w_down", &layer->shared_experts->w_down});
    }
    buffer_slots_ = {{"expert_bias", &layer->router->expert_bias},
                     {"logit_skew", &layer->router->logit_skew},
                     {"accumulated_load", &layer->accumulated_load}};
  }

  std::vector<std::string> parameter_names() const { return names_of(parameter_slots_); }
  std::vector<std::string> buffer_names() const { return names_of(buffer_slots_); }

  /// The tensors the layer holds now, parameters then buffers.
  std::vector<at::Tensor> tensors() const {
    std::vector<at::Tensor> all;
    for (const auto& [name, slot] : parameter_slots_) all.push_back(*slot);
    for (const auto& [name, slot] : buffer_slots_) all.push_back(*slot);
    return all;
  }

  /// Makes the layer use `tensors` (the order of tensors()); each keeps its shape. The first
  /// bind replaces the tensors the C++ layer was built with: their TensorImpls (still listed in
  /// the LibTorch module's parameter dict, never handed to the user) let go of their storage,
  /// so a later `.to(device)` of the Python module does not keep the old copy alive.
  void bind(at::TensorList tensors) {
    const size_t expected = parameter_slots_.size() + buffer_slots_.size();
    TORCH_CHECK(tensors.size() == expected, "moescope MoELayer: expected ", expected,
                " tensors (parameters then buffers), got ", tensors.size());
    size_t i = 0;
    for (auto* slots : {&parameter_slots_, &buffer_slots_}) {
      for (auto& [name, slot] : *slots) {
        const at::Tensor& tensor = tensors[i++];
        TORCH_CHECK(tensor.defined() && tensor.sizes() == slot->sizes(),
                    "moescope MoELayer: ", name, " must keep its shape ", slot->sizes(), ", got ",
                    tensor.defined() ? tensor.sizes() : at::IntArrayRef{});
        if (slot->is_same(tensor)) continue;
        at::Tensor replaced = std::exchange(*slot, tensor);
        if (first_bind_) {
          at::NoGradGuard no_grad;
          replaced.set_();
        }
      }
    }
    first_bind_ = false;
  }

  std::string describe_config() const {
    const MoEConfig& config = layer->config();
    return "hidden_size=" + std::to_string(config.hidden_size) +
           ", ffn_hidden_size=" + std::to_string(config.ffn_hidden_size) +
           ", num_experts=" + std::to_string(config.num_experts) +
           ", top_k=" + std::to_string(config.top_k) +
           ", layer_index=" + std::to_string(config.layer_index);
  }

  std::vector<int64_t> local_slot_experts() const {
    const std::vector<int32_t> experts =
        layer->expert_slots().local_slot_experts(layer->group().rank());
    return {experts.begin(), experts.end()};
  }

  std::vector<int64_t> physical_to_logical() const {
    const auto& slots = layer->expert_slots().placement().physical_to_logical;
    return {slots.begin(), slots.end()};
  }

  at::Tensor last_tokens_per_expert() const {
    const at::Tensor& tokens = layer->last_tokens_per_expert();
    return tokens.defined() ? tokens : at::Tensor();
  }

  MoELayer layer{nullptr};

 private:
  using Slots = std::vector<std::pair<std::string, at::Tensor*>>;
  static std::vector<std::string> names_of(const Slots& slots) {
    std::vector<std::string> names;
    for (const auto& [name, slot] : slots) names.push_back(name);
    return names;
  }
  Slots parameter_slots_;
  Slots buffer_slots_;
  bool first_bind_ = true;
};

// The ExpertRebalancer's options by the names the Python ExpertBalancer sends, each read from
// and written as a double (counts truncated, flags: non-zero is true), one table for both ways.
struct RebalancerOptionCoding {
  void (*set)(RebalancerOptions& options, double value);
  double (*get)(const RebalancerOptions& options);
};

const std::map<std::string, RebalancerOptionCoding>& rebalancer_option_codings() {
  using Options = RebalancerOptions;
  static const std::map<std::string, RebalancerOptionCoding> table = {
      {"interval_steps",
       {[](Options& o, double v) { o.interval_steps = int64_t(v); },
        [](const Options& o) { return double(o.interval_steps); }}},
      {"warmup_steps",
       {[](Options& o, double v) { o.warmup_steps = int64_t(v); },
        [](const Options& o) { return double(o.warmup_steps); }}},
      {"imbalance_threshold",
       {[](Options& o, double v) { o.imbalance_threshold = v; },
        [](const Options& o) { return o.imbalance_threshold; }}},
      {"transfer_bytes_per_second",
       {[](Options& o, double v) { o.transfer_bytes_per_second = v; },
        [](const Options& o) { return o.transfer_bytes_per_second; }}},
      {"incremental_max_over_mean",
       {[](Options& o, double v) { o.incremental_max_over_mean = v; },
        [](const Options& o) { return o.incremental_max_over_mean; }}},
      {"ema_alpha",
       {[](Options& o, double v) { o.predictor.ema_alpha = v; },
        [](const Options& o) { return o.predictor.ema_alpha; }}},
      // > 0: the predictor is a moving window of that many steps; 0: the EMA.
      {"window_steps",
       {[](Options& o, double v) {
          if (v <= 0) return;
          o.predictor.kind = balancer::LoadPredictorConfig::Kind::kWindow;
          o.predictor.window_steps = int(v);
        },
        [](const Options& o) {
          return o.predictor.kind == balancer::LoadPredictorConfig::Kind::kWindow
                     ? double(o.predictor.window_steps)
                     : 0.0;
        }}},
      // 1: RebalanceRule::kImbalanceGain, 0: kPredictedNetGain.
      {"imbalance_rule",
       {[](Options& o, double v) {
          o.rule = v != 0 ? RebalanceRule::kImbalanceGain : RebalanceRule::kPredictedNetGain;
        },
        [](const Options& o) { return o.rule == RebalanceRule::kImbalanceGain ? 1.0 : 0.0; }}},
      {"decision_window_steps",
       {[](Options& o, double v) { o.window_steps = int64_t(v); },
        [](const Options& o) { return double(o.window_steps); }}},
      {"plan_for_next_window",
       {[](Options& o, double v) { o.plan_for_next_window = v != 0; },
        [](const Options& o) { return o.plan_for_next_window ? 1.0 : 0.0; }}},
      {"replica_gradients_packed",
       {[](Options& o, double v) { o.replica_gradients_packed = v != 0; },
        [](const Options& o) { return o.replica_gradients_packed ? 1.0 : 0.0; }}},
      {"accuracy_horizon_steps",
       {[](Options& o, double v) { o.accuracy_horizon_steps = int(v); },
        [](const Options& o) { return double(o.accuracy_horizon_steps); }}},
  };
  return table;
}

// Every option of a default RebalancerOptions by name: what the Python ExpertBalancer's defaults
// are checked against (tests/python_runtime).
c10::Dict<std::string, double> rebalancer_option_defaults() {
  c10::Dict<std::string, double> defaults;
  const RebalancerOptions options;
  for (const auto& [name, coding] : rebalancer_option_codings()) {
    defaults.insert(name, coding.get(options));
  }
  return defaults;
}

/// ExpertRebalancer over the layers added to it (built at the first after_step, when every
/// layer is known). Options by name (rebalancer_option_codings).
class RebalancerHolder : public torch::CustomClassHolder {
 public:
  explicit RebalancerHolder(const c10::Dict<std::string, double>& options) {
    for (const auto& entry : options) {
      const auto coding = rebalancer_option_codings().find(entry.key());
      TORCH_CHECK(coding != rebalancer_option_codings().end(), "ExpertBalancer: unknown option '",
                  entry.key(), "'");
      coding->second.set(options_, entry.value());
    }
  }

  void add_layer(const c10::intrusive_ptr<LayerHolder>& layer) {
    TORCH_CHECK(!rebalancer_, "ExpertBalancer: layers must be added before the first step");
    layers_.push_back(layer->layer);
  }

  void set_extra_slot_state(int64_t layer_position, const std::vector<at::Tensor>& tensors) {
    rebalancer().set_extra_slot_state(static_cast<size_t>(layer_position), tensors);
  }

  /// One dict per layer decided at this step: step, layer, imbalance_before/after, gain/cost
  /// seconds, bytes_to_move, applied, bytes_sent/received, experts_received, moves, seconds,
  /// and the cost rule's gain_ms, replica_sync_ms, migration_ms, window_steps, net_ms,
  /// net_stderr_ms, reason (moescope_rebalance_reason).
  c10::List<c10::Dict<std::string, double>> after_step(int64_t step, double step_seconds) {
    return decisions_as_dicts(rebalancer().after_step(step, step_seconds));
  }

  /// after_step's halves for a caller that sums in its own all-reduce (ExpertBalancer packs
  /// them with the router biases' loads): this rank's sums [n] double ...
  at::Tensor local_step_sums(double step_seconds) {
    return rebalancer().local_step_sums(step_seconds);
  }
  /// ... and the decisions from them summed over the group.
  c10::List<c10::Dict<std::string, double>> after_summed_step(int64_t step,
                                                              const at::Tensor& summed) {
    return decisions_as_dicts(rebalancer().after_summed_step(step, summed));
  }

  /// The forecast tokens per expert of the layer at `layer_position` ([E], empty before data).
  std::vector<double> predicted_load(int64_t layer_position) {
    return rebalancer().forecaster().predict(static_cast<int>(layer_position));
  }

 private:
  static c10::List<c10::Dict<std::string, double>> decisions_as_dicts(
      const std::vector<RebalanceDecision>& decisions) {
    c10::List<c10::Dict<std::string, double>> out;
    for (const RebalanceDecision& decision : decisions) {
      c10::Dict<std::string, double> d;
      d.insert("step", static_cast<double>(decision.step));
      d.insert("layer", static_cast<double>(decision.layer));
      d.insert("imbalance_before", decision.imbalance_before);
      d.insert("imbalance_after", decision.imbalance_after);
      d.insert("gain_seconds", decision.gain_seconds);
      d.insert("cost_seconds", decision.cost_seconds);
      d.insert("bytes_to_move", static_cast<double>(decision.bytes_to_move));
      d.insert("applied", decision.applied ? 1.0 : 0.0);
      d.insert("bytes_sent", static_cast<double>(decision.change.migration.bytes_sent));
      d.insert("bytes_received", static_cast<double>(decision.change.migration.bytes_received));
      d.insert("experts_received", static_cast<double>(decision.change.migration.experts_received));
      d.insert("moves", static_cast<double>(decision.change.moves));
      d.insert("seconds", decision.change.seconds);
      // The cost rule's numbers (ms; net = gain - replica sync - migration / window).
      d.insert("gain_ms", decision.verdict.gain_ms);
      d.insert("replica_sync_ms", decision.verdict.replica_sync_ms);
      d.insert("migration_ms", decision.verdict.migration_ms);
      d.insert("window_steps", decision.verdict.window_steps);
      d.insert("net_ms", decision.verdict.net_ms);
      d.insert("net_stderr_ms", decision.verdict.net_stderr_ms);
      d.insert("reason", static_cast<double>(decision.verdict.reason));
      out.push_back(std::move(d));
    }
    return out;
  }

  ExpertRebalancer& rebalancer() {
    if (!rebalancer_) rebalancer_ = std::make_unique<ExpertRebalancer>(layers_, options_);
    return *rebalancer_;
  }
  RebalancerOptions options_;
  std::vector<MoELayer> layers_;
  std::unique_ptr<ExpertRebalancer> rebalancer_;
};

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, int64_t, int64_t> moe_layer_forward(
    const c10::intrusive_ptr<LayerHolder>& holder, const at::Tensor& hidden, at::TensorList tensors,
    bool training) {
  holder->bind(tensors);
  holder->layer->train(training);
  MoEOutput out = holder->layer->forward(hidden);
  return {out.output, out.aux_loss, out.tokens_per_expert, out.num_dropped, out.num_received_rows};
}

void set_step(int64_t step) {
  set_training_step(step);
}

// A MoELayer member function as a method of the TorchScript class: self->layer->method(args).
// torch::class_::def needs a callable with a concrete signature (no generic lambda), so the
// arguments are taken from the member function's type.
template <auto Method, typename Result, typename... Args>
Result call_on_layer(const c10::intrusive_ptr<LayerHolder>& self, Args... args) {
  return ((*self->layer).*Method)(args...);
}
template <auto Method, typename Result, typename... Args>
constexpr auto layer_method_of(Result (MoELayerImpl::*)(Args...)) {
  return &call_on_layer<Method, Result, Args...>;
}
template <auto Method, typename Result, typename... Args>
constexpr auto layer_method_of(Result (MoELayerImpl::*)(Args...) const) {
  return &call_on_layer<Method, Result, Args...>;
}
template <auto Method>
constexpr auto layer_method = layer_method_of<Method>(Method);

}  // namespace

TORCH_LIBRARY(moescope, m) {
  m.class_<LayerHolder>("MoELayer")
      .def(torch::init<std::string, std::optional<c10::intrusive_ptr<c10d::ProcessGroup>>,
                       std::string>())
      .def("parameter_names", &LayerHolder::parameter_names)
      .def("buffer_names", &LayerHolder::buffer_names)
      .def("tensors", &LayerHolder::tensors)
      .def("bind", [](const c10::intrusive_ptr<LayerHolder>& self,
                      const std::vector<at::Tensor>& t) { self->bind(t); })
      .def("describe_config", &LayerHolder::describe_config)
      .def("update_expert_bias", layer_method<&MoELayerImpl::update_expert_bias>)
      .def("sync_replica_gradients", layer_method<&MoELayerImpl::sync_replica_gradients>)
      .def("replica_gradient_partial_sums",
           layer_method<&MoELayerImpl::replica_gradient_partial_sums>)
      .def("take_replica_gradient_sums", layer_method<&MoELayerImpl::take_replica_gradient_sums>)
      .def("expert_bias_partial_load", layer_method<&MoELayerImpl::expert_bias_partial_load>)
      .def("update_expert_bias_from", layer_method<&MoELayerImpl::update_expert_bias_from>)
      // Sums `tensor` over the layer's group in place, recorded as the comm op `name`.
      .def("all_reduce_sum",
           [](const c10::intrusive_ptr<LayerHolder>& self, const at::Tensor& tensor,
              const std::string& name) {
             return all_reduce_sum(tensor, self->layer->group(), name.c_str());
           })
      .def("load_full_expert_weights", layer_method<&MoELayerImpl::load_full_expert_weights>)
      .def("local_slot_experts", &LayerHolder::local_slot_experts)
      .def("physical_to_logical", &LayerHolder::physical_to_logical)
      .def("last_tokens_per_expert", &LayerHolder::last_tokens_per_expert)
      .def("rank",
           [](const c10::intrusive_ptr<LayerHolder>& self) { return self->layer->group().rank(); })
      .def("group_size",
           [](const c10::intrusive_ptr<LayerHolder>& self) { return self->layer->group().size(); })
      .def("num_local_experts", layer_method<&MoELayerImpl::num_local_experts>)
      .def("drain_trace_statistics", [](const c10::intrusive_ptr<LayerHolder>& self) {
        self->layer->trace_statistics().drain();
      });

  m.class_<RebalancerHolder>("ExpertRebalancer")
      .def(torch::init<c10::Dict<std::string, double>>())
      .def("add_layer", &RebalancerHolder::add_layer)
      .def("set_extra_slot_state", &RebalancerHolder::set_extra_slot_state)
      .def("after_step", &RebalancerHolder::after_step)
      .def("local_step_sums", &RebalancerHolder::local_step_sums)
      .def("after_summed_step", &RebalancerHolder::after_summed_step)
      .def("predicted_load", &RebalancerHolder::predicted_load);

  m.def(
      "moe_layer_forward(__torch__.torch.classes.moescope.MoELayer layer, Tensor hidden, "
      "Tensor[] tensors, bool training) -> (Tensor output, Tensor aux_loss, "
      "Tensor tokens_per_expert, int num_dropped, int num_received_rows)");
  m.def("set_training_step(int step) -> ()", &set_step);
  m.def("rebalancer_option_defaults() -> Dict(str, float)", &rebalancer_option_defaults);
  // The config `text` as the C++ side reads it, every field written back (its defaults where
  // `text` is empty): what the Python MoEConfig is checked against.
  m.def("moe_config_text(str text) -> str",
        [](const std::string& text) { return moe_config_text(parse_moe_config_text(text)); });
}

// Autograd sees the runtime's ops (and its custom autograd Functions) inside the kernel.
TORCH_LIBRARY_IMPL(moescope, CompositeImplicitAutograd, m) {
  m.impl("moe_layer_forward", &moe_layer_forward);
}

}  // namespace moescope::runtime::python
