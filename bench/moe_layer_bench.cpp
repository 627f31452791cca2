// moe_layer_bench: forward+backward tokens/s of MoELayer against the loop-over-experts oracle
// (MoELayer::forward_loop_oracle: same router, same weights, experts as a plain loop of
// autograd ops), measured in the same run, alternating the two so drift hits both alike.
//
//   moe_layer_bench [--tokens 4096] [--hidden 512] [--ffn 1024] [--experts 8] [--top-k 2]
//                   [--iters 6] [--dtype float32|bfloat16|both] [--device cpu|cuda]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "moescope/runtime/moe_layer.h"

using moescope::runtime::MoEConfig;
using moescope::runtime::MoELayer;
using moescope::runtime::MoEOutput;

namespace {

struct Options {
  int64_t tokens = 4096, hidden = 512, ffn = 1024, experts = 8, top_k = 2;
  int iters = 6;
  std::string dtype = "both";
  std::string device = "cpu";
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
}

// Times one forward+backward of `forward` (seconds).
template <typename Forward>
double time_step(MoELayer& layer, const at::Tensor& input, const at::Tensor& out_grad,
                 Forward forward) {
  layer->zero_grad();
  at::Tensor x = input.detach().requires_grad_(true);
  synchronize(input.device());
  const auto start = std::chrono::steady_clock::now();
  MoEOutput out = forward(x);
  (out.output * out_grad).sum().backward();
  synchronize(input.device());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run(const Options& options, at::ScalarType dtype) {
  MoEConfig config;
  config.hidden_size = options.hidden;
  config.ffn_hidden_size = options.ffn;
  config.num_experts = options.experts;
  config.top_k = options.top_k;
  torch::manual_seed(0);
  const at::Device device(options.device);
  MoELayer layer(config);
  layer->to(device);
  layer->experts->to(dtype);  // the router keeps its fp32 gate
  const auto tensor_options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor input = at::randn({options.tokens, options.hidden}, tensor_options);
  const at::Tensor out_grad = at::randn({options.tokens, options.hidden}, tensor_options);

  auto grouped = [&](const at::Tensor& x) { return layer->forward(x); };
  auto oracle = [&](const at::Tensor& x) { return layer->forward_loop_oracle(x); };
  {
    at::NoGradGuard no_grad;
    const double difference =
        (grouped(input).output.to(at::kFloat) - oracle(input).output.to(at::kFloat))
            .abs()
            .max()
            .item<double>();
    std::printf("  max |MoELayer - oracle| on the output: %.3g\n", difference);
  }
  time_step(layer, input, out_grad, grouped);  // warm-up
  time_step(layer, input, out_grad, oracle);
  std::vector<double> grouped_s, oracle_s;
  for (int i = 0; i < options.iters; ++i) {
    grouped_s.push_back(time_step(layer, input, out_grad, grouped));
    oracle_s.push_back(time_step(layer, input, out_grad, oracle));
  }
  const double grouped_tps = static_cast<double>(options.tokens) / median(grouped_s);
  const double oracle_tps = static_cast<double>(options.tokens) / median(oracle_s);
  std::printf("| %-8s | %-4s | %7lld | %2lld | %lld | %4lld | %5lld | %12.0f | %12.0f | %5.2fx |\n",
              c10::toString(dtype), options.device.c_str(), static_cast<long long>(options.tokens),
              static_cast<long long>(options.experts), static_cast<long long>(options.top_k),
              static_cast<long long>(options.hidden), static_cast<long long>(options.ffn),
              grouped_tps, oracle_tps, grouped_tps / oracle_tps);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--tokens")
      options.tokens = std::atoll(value);
    else if (flag == "--hidden")
      options.hidden = std::atoll(value);
    else if (flag == "--ffn")
      options.ffn = std::atoll(value);
    else if (flag == "--experts")
      options.experts = std::atoll(value);
    else if (flag == "--top-k")
      options.top_k = std::atoll(value);
    else if (flag == "--iters")
      options.iters = std::atoi(value);
    else if (flag == "--dtype")
      options.dtype = value;
    else if (flag == "--device")
      options.device = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::printf("MoELayer vs loop-over-experts oracle, forward+backward, %d threads\n",
              at::get_num_threads());
  std::printf(
      "| dtype    | dev  | tokens  | E  | k | H    | F     | MoELayer tok/s | oracle tok/s | ratio "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  if (options.dtype == "float32" || options.dtype == "both") run(options, at::kFloat);
  if (options.dtype == "bfloat16" || options.dtype == "both") run(options, at::kBFloat16);
  return 0;
}
