// moe_layer_device_check: the MoE runtime on a CUDA GPU (H200), bf16.
//   1. correctness: MoELayer (grouped experts, at::_grouped_mm when available) against the
//      loop-over-experts oracle on the same weights, forward and backward, bf16 and fp32;
//   2. performance: forward+backward tokens/s of MoELayer, the oracle, and a dense SwiGLU FFN
//      with the same active parameters per token (width top_k * ffn), as a markdown table.
// Exit status 1 when a correctness check fails or no CUDA device is there (never a silent pass).
// Build: tests/device/moe_layer_build.sh; run: build-device/moe_layer_device_check
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "moescope/runtime/grouped_experts.h"
#include "moescope/runtime/moe_layer.h"

using namespace moescope::runtime;

namespace {

void sync() {
  torch::cuda::synchronize();
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor fa = a.detach().to(at::kFloat), fb = b.detach().to(at::kFloat);
  return ((fa - fb).abs().max() / fb.abs().max().clamp_min(1e-30)).item<double>();
}

struct Grads {
  at::Tensor output, grad_input, grad_w_gate_up, grad_w_down, grad_gate;
};

template <typename Forward>
Grads forward_backward(MoELayer& layer, const at::Tensor& input, const at::Tensor& out_grad,
                       Forward forward) {
  layer->zero_grad();
  at::Tensor x = input.detach().requires_grad_(true);
  MoEOutput out = forward(x);
  (out.output * out_grad).sum().backward();
  return {out.output.detach(), x.grad().clone(), layer->experts->w_gate_up.grad().clone(),
          layer->experts->w_down.grad().clone(), layer->router->gate_weight.grad().clone()};
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
              uses_device_grouped_mm(a, b) ? "at::_grouped_mm" : "loop of at::mm");
  return ok;
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
  auto dense_step = [&] {
    at::Tensor x = input.detach().requires_grad_(true);
    (swiglu_expert(x, dense_w1, dense_w2) * out_grad).sum().backward();
  };
  const double moe_s = median_seconds([&] { layer_step(false); }, 10);
  const double oracle_s = median_seconds([&] { layer_step(true); }, 10);
  const double dense_s = median_seconds(dense_step, 10);
  const double t = static_cast<double>(tokens);
  std::printf(
      "| %6lld | %5lld | %5lld | %3lld | %lld | %12.0f | %12.0f | %12.0f | %6.2fx | %6.2f |\n",
      static_cast<long long>(tokens), static_cast<long long>(hidden), static_cast<long long>(ffn),
      static_cast<long long>(experts), static_cast<long long>(top_k), t / moe_s, t / oracle_s,
      t / dense_s, oracle_s / moe_s, dense_s / moe_s);
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    std::printf("moe_layer_device_check: FAIL, no CUDA device visible to torch\n");
    return 1;
  }
  std::printf("moe_layer_device_check: correctness, MoELayer vs loop-over-experts oracle (CUDA)\n");
  bool ok = check_correctness(at::kFloat, 1e-4);
  ok = check_correctness(at::kBFloat16, 3e-2) && ok;
  std::printf("\nforward+backward tokens/s, bf16 (dense = SwiGLU FFN of width top_k*ffn)\n");
  std::printf(
      "| tokens | H     | F     | E   | k | MoELayer     | oracle       | dense FFN    | vs oracle "
      "| dense/MoE time |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  benchmark(16384, 2048, 1024, 8, 2);
  benchmark(8192, 7168, 2048, 32, 8);
  std::printf("moe_layer_device_check: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
