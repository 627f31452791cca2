// moe_layer_device_check: the MoE runtime on a CUDA GPU (H200), bf16.
//   1. correctness: MoELayer (grouped experts, at::_grouped_mm when available, the fused CUDA
//      kernels by default) against the loop-over-experts oracle on the same weights, forward and
//      backward, bf16 and fp32;
//   2. fused kernels: the same layer with MoEConfig.use_fused_kernels on and off (fused router,
//      routing map, permute, unpermute+combine, fp32 cuBLAS grouped GEMM vs their ATen paths):
//      identical routing, outputs and gradients within fp32/bf16 bounds, two router setups;
//   3. performance: forward+backward tokens/s of MoELayer (fused kernels and ATen path), the
//      oracle, and a dense SwiGLU FFN with the same active parameters per token (width
//      top_k * ffn), as a markdown table.
// Exit status 1 when a correctness check fails (never a silent pass; a NaN or Inf anywhere
// fails), 77 without a CUDA device (no_cuda_device.h).
// Build: the CMake target moe_layer_device_check (tests/device/CMakeLists.txt); run through
// tests/device/run.sh (part `runtime`).
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "moescope/runtime/grouped_experts.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/runtime/router.h"
#include "moescope/runtime/routing_replay.h"
#include "no_cuda_device.h"
#include "routing_comparison.h"

using namespace moescope::runtime;
using moescope::device_checks::compare_routing;
using moescope::device_checks::RoutingComparison;
using moescope::device_checks::RoutingRule;

namespace {

void sync() {
  torch::cuda::synchronize();
}

// Max |a - b| over max |b|; NaN when either side holds a NaN or Inf (so it never passes).
double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor fa = a.detach().to(at::kFloat), fb = b.detach().to(at::kFloat);
  if (!at::isfinite(fa).all().item<bool>() || !at::isfinite(fb).all().item<bool>()) return NAN;
  return ((fa - fb).abs().max() / fb.abs().max().clamp_min(1e-30)).item<double>();
}

struct Grads {
  at::Tensor output, grad_input, grad_w_gate_up, grad_w_down, grad_gate, aux_loss;
};

// Loss = sum(output * out_grad) (+ aux_loss with include_aux_loss, so that gradients also reach
// the router scores through the balancing losses).
template <typename Forward>
Grads forward_backward(MoELayer& layer, const at::Tensor& input, const at::Tensor& out_grad,
                       Forward forward, bool include_aux_loss = false) {
  layer->zero_grad();
  at::Tensor x = input.detach().requires_grad_(true);
  MoEOutput out = forward(x);
  at::Tensor loss = (out.output * out_grad).sum();
  if (include_aux_loss) loss = loss + out.aux_loss.to(loss.scalar_type());
  loss.backward();
  return {out.output.detach(),
          x.grad().clone(),
          layer->experts->w_gate_up.grad().clone(),
          layer->experts->w_down.grad().clone(),
          layer->router->gate_weight.grad().clone(),
          out.aux_loss.detach()};
}

bool check_correctness(at::ScalarType dtype, double tolerance) {
  MoEConfig config;
  config.hidden_size = 256;
  config.ffn_hidden_size = 512;
  config.num_experts = 8;
  config.top_k = 2;
  config.num_shared_experts = 1;
  config.capacity_factor = 1.25;
  // Expert 7 gets no token: an empty group in the grouped matmuls and their weight gradients.
  config.gate_logit_skew = {0, 0, 0, 0, 0, 0, 0, -100};
  torch::manual_seed(1);
  MoELayer layer(config);
  layer->to(at::kCUDA);
  layer->experts->to(dtype);
  layer->shared_experts->to(dtype);
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(dtype);
  const at::Tensor input = at::randn({1000, 256}, options);  // odd-sized expert groups
  const at::Tensor out_grad = at::randn({1000, 256}, options);
  const Grads grouped = forward_backward(layer, input, out_grad,
                                         [&](const at::Tensor& x) { return layer->forward(x); });
  const Grads oracle = forward_backward(
      layer, input, out_grad, [&](const at::Tensor& x) { return layer->forward_loop_oracle(x); });
  const double errors[] = {max_rel(grouped.output, oracle.output),
                           max_rel(grouped.grad_input, oracle.grad_input),
                           max_rel(grouped.grad_w_gate_up, oracle.grad_w_gate_up),
                           max_rel(grouped.grad_w_down, oracle.grad_w_down),
                           max_rel(grouped.grad_gate, oracle.grad_gate)};
  const char* names[] = {"output", "grad_input", "grad_w_gate_up", "grad_w_down", "grad_gate"};
  bool ok = true;
  for (int i = 0; i < 5; ++i) {
    const bool pass = errors[i] <= tolerance && std::isfinite(errors[i]);
    ok = ok && pass;
    std::printf("  %-9s %-15s max rel err %.3e (bound %.1e) %s\n", c10::toString(dtype), names[i],
                errors[i], tolerance, pass ? "ok" : "FAIL");
  }
  const at::Tensor a = at::empty({16, 256}, options), b = at::empty({8, 256, 512}, options);
  std::printf("  %-9s grouped matmul path: %s\n", c10::toString(dtype),
              grouped_mm_implementation(a, b, config.use_fused_kernels));
  return ok;
}

// Expert scores that tie within this may be chosen either way (as in kernels_check.cu).
constexpr float kRoutingTieTolerance = 1e-5f;

// The fused layer's routing against the ATen layer's, on the ATen router's selection scores
// (scores + expert bias, [T, E] fp32) of the same input.
RoutingComparison compare_routing_with_aten(MoELayer& aten, const at::Tensor& input,
                                            RoutingReplay& aten_routing,
                                            RoutingReplay& fused_routing, const MoEConfig& config) {
  at::NoGradGuard no_grad;
  const RoutingResult routed = aten->router->forward(input);
  at::Tensor selection = routed.scores.to(at::kFloat);
  if (config.enable_expert_bias) selection = selection + aten->router->expert_bias.to(at::kFloat);
  const at::Tensor scores = selection.contiguous().cpu();
  const at::Tensor reference =
      aten_routing.replay(config.layer_index).to(at::kLong).contiguous().cpu();
  const at::Tensor candidate =
      fused_routing.replay(config.layer_index).to(at::kLong).contiguous().cpu();
  TORCH_CHECK(reference.sizes() == candidate.sizes() && reference.size(0) == scores.size(0),
              "routing replays of different shapes: ", reference.sizes(), " ", candidate.sizes(),
              " for scores ", scores.sizes());
  RoutingRule rule;
  rule.num_experts = static_cast<int>(config.num_experts);
  rule.top_k = static_cast<int>(config.top_k);
  rule.num_groups = static_cast<int>(std::max<int64_t>(1, config.num_groups));
  rule.group_top_k = static_cast<int>(std::max<int64_t>(1, config.group_top_k));
  return compare_routing(scores.data_ptr<float>(), reference.data_ptr<int64_t>(),
                         candidate.data_ptr<int64_t>(), reference.size(0), rule,
                         kRoutingTieTolerance);
}

// Copies every parameter and buffer of `from` into `to` (same config but the kernel flag).
void copy_layer_state(MoELayer& from, MoELayer& to) {
  at::NoGradGuard no_grad;
  auto to_parameters = to->named_parameters();
  for (const auto& item : from->named_parameters()) to_parameters[item.key()].copy_(item.value());
  auto to_buffers = to->named_buffers();
  for (const auto& item : from->named_buffers()) to_buffers[item.key()].copy_(item.value());
}

// The layer with use_fused_kernels on against the same layer on the ATen path: the routing is
// compared the way kernels_check.cu compares the router kernel (routing_comparison.h): the
// fused router's softmax/sigmoid differs from ATen's by an ulp or so, so a token whose experts
// tie within 1e-5 may pick another one; such near-ties are counted and printed, any other
// difference fails. The outputs and gradients agree within `tolerance` (float32 sums in another
// order; bf16 rounding of the combine weights on the ATen path); after a near-tie they are
// compared on a rerun of the fused layer with the ATen routing replayed.
bool check_fused_against_aten(const char* name, MoEConfig config, at::ScalarType dtype,
                              double tolerance) {
  config.use_fused_kernels = false;
  torch::manual_seed(3);
  MoELayer aten(config);
  config.use_fused_kernels = true;
  MoELayer fused(config);
  for (MoELayer* layer : {&aten, &fused}) {
    (*layer)->to(at::kCUDA);
    (*layer)->experts->to(dtype);
    if ((*layer)->shared_experts) (*layer)->shared_experts->to(dtype);
  }
  if (config.enable_expert_bias) {  // a non-zero selection bias, as after some updates
    at::NoGradGuard no_grad;
    aten->router->expert_bias.copy_(at::randn({config.num_experts}) * 0.05);
  }
  copy_layer_state(aten, fused);
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(dtype);
  const at::Tensor input = at::randn({4000, config.hidden_size}, options);
  const at::Tensor out_grad = at::randn({4000, config.hidden_size}, options);
  auto aten_routing = std::make_shared<RoutingReplay>();
  auto fused_routing = std::make_shared<RoutingReplay>();
  aten_routing->set_mode(RoutingReplay::Mode::kRecord);
  fused_routing->set_mode(RoutingReplay::Mode::kRecord);
  aten->set_routing_replay(aten_routing);
  fused->set_routing_replay(fused_routing);
  const Grads reference = forward_backward(
      aten, input, out_grad, [&](const at::Tensor& x) { return aten->forward(x); }, true);
  Grads result = forward_backward(
      fused, input, out_grad, [&](const at::Tensor& x) { return fused->forward(x); }, true);
  sync();

  const RoutingComparison routing =
      compare_routing_with_aten(aten, input, *aten_routing, *fused_routing, config);
  bool ok = routing.wrong == 0;
  std::printf(
      "  %-9s %-22s routing: %lld of %lld tokens identical, %lld near-ties (within %.0e), "
      "%lld wrong%s %s\n",
      c10::toString(dtype), name, static_cast<long long>(routing.identical),
      static_cast<long long>(routing.num_tokens), static_cast<long long>(routing.near_ties),
      kRoutingTieTolerance, static_cast<long long>(routing.wrong),
      routing.first_wrong >= 0
          ? (" (first: token " + std::to_string(routing.first_wrong) + ")").c_str()
          : "",
      ok ? "ok" : "FAIL");
  if (routing.near_ties > 0) {
    // A near-tie token went to another expert, so its output differs by more than rounding:
    // compare the rest of the fused path (routing map, permute, grouped GEMM, combine) with the
    // ATen routing replayed into the fused layer (replay bypasses the fused router only).
    std::printf("  %-9s %-22s near-ties: outputs compared with the ATen routing replayed\n",
                c10::toString(dtype), name);
    aten_routing->set_mode(RoutingReplay::Mode::kReplay);
    fused->set_routing_replay(aten_routing);
    result = forward_backward(
        fused, input, out_grad, [&](const at::Tensor& x) { return fused->forward(x); }, true);
    sync();
  }
  const std::vector<std::pair<const char*, double>> errors = {
      {"output", max_rel(result.output, reference.output)},
      {"grad_input", max_rel(result.grad_input, reference.grad_input)},
      {"grad_w_gate_up", max_rel(result.grad_w_gate_up, reference.grad_w_gate_up)},
      {"grad_w_down", max_rel(result.grad_w_down, reference.grad_w_down)},
      {"grad_gate", max_rel(result.grad_gate, reference.grad_gate)},
      {"aux_loss", max_rel(result.aux_loss, reference.aux_loss)}};
  for (const auto& [what, error] : errors) {
    const bool pass = std::isfinite(error) && error <= tolerance;
    ok = ok && pass;
    std::printf("  %-9s %-22s %-15s max rel err %.3e (bound %.1e) %s\n", c10::toString(dtype), name,
                what, error, tolerance, pass ? "ok" : "FAIL");
  }
  return ok;
}

bool check_fused_kernels(at::ScalarType dtype, double tolerance) {
  MoEConfig mixtral;  // softmax top-2, capacity dropping (dropped assignments in every kernel)
  mixtral.hidden_size = 256;
  mixtral.ffn_hidden_size = 512;
  mixtral.num_experts = 8;
  mixtral.top_k = 2;
  mixtral.capacity_factor = 1.1;
  mixtral.aux_loss_coeff = 1e-2;
  mixtral.z_loss_coeff = 1e-3;
  // Expert 7 gets no token: an empty group in the routing map and the grouped matmuls.
  mixtral.gate_logit_skew = {0, 0, 0, 0, 0, 0, 0, -100};
  MoEConfig deepseek;  // sigmoid, group-limited, biased selection, normalised and scaled weights
  deepseek.hidden_size = 256;
  deepseek.ffn_hidden_size = 256;
  deepseek.num_experts = 32;
  deepseek.top_k = 6;
  deepseek.score_function = ScoreFunction::kSigmoid;
  deepseek.num_groups = 8;
  deepseek.group_top_k = 3;
  deepseek.normalize_top_k_weights = true;
  deepseek.routed_scaling_factor = 2.5;
  deepseek.enable_expert_bias = true;
  deepseek.aux_loss_coeff = 1e-3;
  deepseek.num_shared_experts = 1;
  const bool mixtral_ok = check_fused_against_aten("softmax/capacity", mixtral, dtype, tolerance);
  const bool deepseek_ok =
      check_fused_against_aten("sigmoid/groups/bias", deepseek, dtype, tolerance);
  return mixtral_ok && deepseek_ok;
}

template <typename Step>
double median_seconds(Step step, int iters) {
  step();
  step();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    sync();
    const auto start = std::chrono::steady_clock::now();
    step();
    sync();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void benchmark(int64_t tokens, int64_t hidden, int64_t ffn, int64_t experts, int64_t top_k) {
  MoEConfig config;
  config.hidden_size = hidden;
  config.ffn_hidden_size = ffn;
  config.num_experts = experts;
  config.top_k = top_k;
  torch::manual_seed(0);
  MoELayer layer(config);
  layer->to(at::kCUDA);
  layer->experts->to(at::kBFloat16);
  MoEConfig aten_config = config;  // the same layer on the ATen path (no fused kernels)
  aten_config.use_fused_kernels = false;
  MoELayer aten_layer(aten_config);
  aten_layer->to(at::kCUDA);
  aten_layer->experts->to(at::kBFloat16);
  copy_layer_state(layer, aten_layer);
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor input = at::randn({tokens, hidden}, options);
  const at::Tensor out_grad = at::randn({tokens, hidden}, options);
  // Dense SwiGLU with the active parameters of one token: width top_k * ffn.
  const at::Tensor dense_w1 =
      (at::randn({hidden, 2 * top_k * ffn}, options) * 0.02).requires_grad_(true);
  const at::Tensor dense_w2 =
      (at::randn({top_k * ffn, hidden}, options) * 0.02).requires_grad_(true);

  auto layer_step = [&](bool oracle) {
    layer->zero_grad();
    at::Tensor x = input.detach().requires_grad_(true);
    MoEOutput out = oracle ? layer->forward_loop_oracle(x) : layer->forward(x);
    (out.output * out_grad).sum().backward();
  };
  auto aten_layer_step = [&] {
    aten_layer->zero_grad();
    at::Tensor x = input.detach().requires_grad_(true);
    (aten_layer->forward(x).output * out_grad).sum().backward();
  };
  auto dense_step = [&] {
    at::Tensor x = input.detach().requires_grad_(true);
    (swiglu_expert(x, dense_w1, dense_w2) * out_grad).sum().backward();
  };
  const double moe_s = median_seconds([&] { layer_step(false); }, 10);
  const double aten_s = median_seconds(aten_layer_step, 10);
  const double oracle_s = median_seconds([&] { layer_step(true); }, 10);
  const double dense_s = median_seconds(dense_step, 10);
  const double t = static_cast<double>(tokens);
  std::printf(
      "| %6lld | %5lld | %5lld | %3lld | %lld | %12.0f | %12.0f | %6.2fx | %12.0f | %12.0f | "
      "%6.2fx | %6.2f |\n",
      static_cast<long long>(tokens), static_cast<long long>(hidden), static_cast<long long>(ffn),
      static_cast<long long>(experts), static_cast<long long>(top_k), t / moe_s, t / aten_s,
      aten_s / moe_s, t / oracle_s, t / dense_s, oracle_s / moe_s, dense_s / moe_s);
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    return moescope::device_checks::report_no_cuda_device("moe_layer_device_check",
                                                          "none visible to LibTorch");
  }
  std::printf("moe_layer_device_check: correctness, MoELayer vs loop-over-experts oracle (CUDA)\n");
  bool ok = check_correctness(at::kFloat, 1e-4);
  ok = check_correctness(at::kBFloat16, 3e-2) && ok;
  std::printf("\nfused CUDA kernels (use_fused_kernels) vs the ATen path, forward+backward\n");
  // fp32: same math, sums in another order. bf16: the ATen path rounds the combine weights to
  // bf16 and accumulates the combine in bf16, the fused kernel in fp32; the experts' bf16
  // GEMMs amplify that difference like in the oracle check above.
  ok = check_fused_kernels(at::kFloat, 1e-4) && ok;
  ok = check_fused_kernels(at::kBFloat16, 3e-2) && ok;
  std::printf(
      "\nforward+backward tokens/s, bf16 (MoELayer with fused kernels / ATen path; dense = "
      "SwiGLU FFN of width top_k*ffn)\n");
  std::printf(
      "| tokens | H     | F     | E   | k | MoELayer     | ATen path    | fused gain | oracle  "
      "     | dense FFN    | vs oracle | dense/MoE time |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  benchmark(16384, 2048, 1024, 8, 2);
  benchmark(8192, 7168, 2048, 32, 8);
  std::printf("moe_layer_device_check: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
