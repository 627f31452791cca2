// moe_layer_bench: forward+backward tokens/s of MoELayer against the loop-over-experts oracle
// (MoELayer::forward_loop_oracle: same router, same weights, experts as a plain loop of
// autograd ops), measured in the same run, alternating the two so drift hits both alike.
// A third measurement, the GEMM floor, runs only the six expert matmuls of a forward+backward
// (gate/up and down forward; two input and two weight gradients) through grouped_mm for the same
// routing: no implementation that calls the same matmul library can be faster, so
// oracle time / floor time bounds the ratio any MoE layer can reach against the oracle here.
// --cpu-gemm picks the library of MoELayer's (and the floor's) float32 CPU matmuls: oneDNN (the
// runtime's default) or at::mm; the oracle always runs plain autograd ops, i.e. at::mm. With
// at::mm on both sides the ratio is what the grouped design alone gains.
//
//   moe_layer_bench [--tokens 4096] [--hidden 512] [--ffn 1024] [--experts 8] [--top-k 2]
//                   [--iters 6] [--dtype float32|bfloat16|both] [--device cpu|cuda]
//                   [--recompute-expert-activation 0|1] [--cpu-gemm onednn|aten]
//                   [--malloc-tuning 1|0] [--experts-cache 1|0] [--fresh-input 0|1]
// --malloc-tuning 1 (the default) fixes glibc's malloc thresholds as moe_train does by default
// (tune_glibc_malloc_for_training), for all three measurements alike. --experts-cache 0 turns
// off the experts' HostTensorCache (fresh CPU intermediates every step, as before it existed).
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

#include "moescope/runtime/grouped_experts.h"
#include "moescope/runtime/host_malloc_tuning.h"
#include "moescope/runtime/host_tensor_cache.h"
#include "moescope/runtime/moe_layer.h"

using moescope::runtime::grouped_mm;
using moescope::runtime::grouped_mm_weight_grad;
using moescope::runtime::MoEConfig;
using moescope::runtime::MoELayer;
using moescope::runtime::MoEOutput;

namespace {

struct Options {
  int64_t tokens = 4096, hidden = 512, ffn = 1024, experts = 8, top_k = 2;
  int iters = 6;
  std::string dtype = "both";
  std::string device = "cpu";
  bool recompute_expert_activation = false;
  std::string cpu_gemm = "onednn";
  bool malloc_tuning = true;
  bool experts_cache = true;
  bool fresh_input = false;
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

// Times the six expert matmuls of one forward+backward (seconds) for `rows_per_expert`, with
// operands shaped like the layer's: rows [R, H], w_gate_up [E, H, 2F], w_down [E, F, H].
double time_gemm_floor(const MoELayer& layer, const std::vector<int64_t>& rows_per_expert,
                       const at::TensorOptions& tensor_options) {
  const at::Tensor w_gate_up = layer->experts->w_gate_up.detach();
  const at::Tensor w_down = layer->experts->w_down.detach();
  int64_t total_rows = 0;
  for (int64_t count : rows_per_expert) total_rows += count;
  const at::Tensor rows = at::randn({total_rows, w_gate_up.size(1)}, tensor_options);
  const at::Tensor activation = at::randn({total_rows, w_down.size(1)}, tensor_options);
  const at::Tensor grad_out = at::randn({total_rows, w_down.size(2)}, tensor_options);
  const at::Tensor grad_gate_up = at::randn({total_rows, w_gate_up.size(2)}, tensor_options);
  synchronize(rows.device());
  const auto start = std::chrono::steady_clock::now();
  std::vector<at::Tensor> products;  // kept alive so every matmul's output is allocated
  products.push_back(grouped_mm(rows, w_gate_up, rows_per_expert, false));
  products.push_back(grouped_mm(activation, w_down, rows_per_expert, false));
  products.push_back(grouped_mm(grad_out, w_down.transpose(1, 2), rows_per_expert, false));
  products.push_back(grouped_mm_weight_grad(activation, grad_out, rows_per_expert, false));
  products.push_back(grouped_mm(grad_gate_up, w_gate_up.transpose(1, 2), rows_per_expert, false));
  products.push_back(grouped_mm_weight_grad(rows, grad_gate_up, rows_per_expert, false));
  synchronize(rows.device());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds;
}

void run(const Options& options, at::ScalarType dtype) {
  MoEConfig config;
  config.hidden_size = options.hidden;
  config.ffn_hidden_size = options.ffn;
  config.num_experts = options.experts;
  config.top_k = options.top_k;
  config.recompute_expert_activation = options.recompute_expert_activation;
  torch::manual_seed(0);
  const at::Device device(options.device);
  MoELayer layer(config);
  layer->to(device);
  layer->experts->to(dtype);  // the router keeps its fp32 gate
  const auto tensor_options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor input = at::randn({options.tokens, options.hidden}, tensor_options);
  const at::Tensor out_grad = at::randn({options.tokens, options.hidden}, tensor_options);

  std::vector<int64_t> rows_per_expert;
  {
    at::NoGradGuard no_grad;
    const at::Tensor counts = layer->forward(input).tokens_per_expert.cpu();
    for (int64_t e = 0; e < counts.size(0); ++e)
      rows_per_expert.push_back(counts[e].item<int64_t>());
  }
  auto grouped = [&](const at::Tensor& x) { return layer->forward(x); };
  auto oracle = [&](const at::Tensor& x) { return layer->forward_loop_oracle(x); };
  {
    at::NoGradGuard no_grad;
    const double difference =
        (grouped(input).output.to(at::kFloat) - oracle(input).output.to(at::kFloat))
            .abs()
            .max()
            .item<double>();
    std::printf("  max |MoELayer - oracle| on the output: %.3g; experts' matmuls: %s\n", difference,
                moescope::runtime::grouped_mm_implementation(
                    input, layer->experts->w_gate_up.detach(), config.use_fused_kernels));
  }
  time_step(layer, input, out_grad, grouped);  // warm-up
  time_step(layer, input, out_grad, oracle);
  time_gemm_floor(layer, rows_per_expert, tensor_options);
  std::vector<double> grouped_s, oracle_s, floor_s;
  for (int i = 0; i < options.iters; ++i) {
    // --fresh-input 1: new tokens every step, so the routing (and every group's size) changes
    // as in training; both sides get the same step input.
    const at::Tensor step_input =
        options.fresh_input ? at::randn({options.tokens, options.hidden}, tensor_options) : input;
    grouped_s.push_back(time_step(layer, step_input, out_grad, grouped));
    oracle_s.push_back(time_step(layer, step_input, out_grad, oracle));
    floor_s.push_back(time_gemm_floor(layer, rows_per_expert, tensor_options));
  }
  const auto tokens = static_cast<double>(options.tokens);
  const double grouped_tps = tokens / median(grouped_s);
  const double oracle_tps = tokens / median(oracle_s);
  const double floor_tps = tokens / median(floor_s);
  std::printf(
      "| %-8s | %-4s | %7lld | %2lld | %lld | %4lld | %5lld | %12.0f | %12.0f | %5.2fx | %12.0f | "
      "%5.2fx |\n",
      c10::toString(dtype), options.device.c_str(), static_cast<long long>(options.tokens),
      static_cast<long long>(options.experts), static_cast<long long>(options.top_k),
      static_cast<long long>(options.hidden), static_cast<long long>(options.ffn), grouped_tps,
      oracle_tps, grouped_tps / oracle_tps, floor_tps, floor_tps / oracle_tps);
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
    else if (flag == "--recompute-expert-activation")
      options.recompute_expert_activation = std::atoi(value) != 0;
    else if (flag == "--fresh-input")
      options.fresh_input = std::atoi(value) != 0;
    else if (flag == "--experts-cache")
      options.experts_cache = std::atoi(value) != 0;
    else if (flag == "--malloc-tuning")
      options.malloc_tuning = std::atoi(value) != 0;
    else if (flag == "--cpu-gemm" &&
             (std::strcmp(value, "onednn") == 0 || std::strcmp(value, "aten") == 0))
      options.cpu_gemm = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (options.malloc_tuning) moescope::runtime::tune_glibc_malloc_for_training();
  if (!options.experts_cache) moescope::runtime::HostTensorCache::experts().set_max_cached_bytes(0);
  moescope::runtime::set_cpu_float32_gemm(options.cpu_gemm == "aten"
                                              ? moescope::runtime::CpuFloat32Gemm::kATen
                                              : moescope::runtime::CpuFloat32Gemm::kOneDnn);
  std::printf("MoELayer vs loop-over-experts oracle, forward+backward, %d threads%s\n",
              at::get_num_threads(),
              options.recompute_expert_activation ? ", expert activation recomputed" : "");
  std::printf("MoELayer and floor float32 CPU GEMM: %s; the oracle's: at::mm; glibc malloc: %s\n",
              options.cpu_gemm == "aten" ? "at::mm" : "oneDNN matmul where LibTorch has it",
              options.malloc_tuning ? "tuned as moe_train" : "default");
  std::printf("experts' CPU intermediates: %s\n",
              options.experts_cache ? "HostTensorCache" : "fresh tensors (cache off)");
  std::printf(
      "| dtype    | dev  | tokens  | E  | k | H    | F     | MoELayer tok/s | oracle tok/s | ratio "
      "| GEMM floor tok/s | ratio bound |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  if (options.dtype == "float32" || options.dtype == "both") run(options, at::kFloat);
  if (options.dtype == "bfloat16" || options.dtype == "both") run(options, at::kBFloat16);
  return 0;
}
