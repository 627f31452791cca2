// GPU check of moescope's MoE kernels (run on the H200 machine, not in CI):
//   1. correctness: every CUDA op against its CPU reference on random inputs. Outputs are
//      filled with a sentinel first (NaN for floats, 0x7f7f7f7f for ints), so an element the
//      kernel never wrote fails; NaN never passes; errors must sit within the dtype's bound.
//   2. performance: permute/unpermute GB/s against measured device-to-device copy bandwidth,
//      router microseconds (16k tokens x 256 experts, top-8), cuBLAS grouped GEMM TFLOP/s
//      against a dense bf16 cuBLAS GEMM of the same FLOPs on DeepSeek-like shapes.
// Prints a table last; exits 1 when any correctness check fails (targets are reported, not
// enforced), 77 without a CUDA device (no_cuda_device.h). Build: the CMake target
// kernels_device_check (tests/device/CMakeLists.txt, part of device_bundle).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "moescope/kernels/cpu_reference.h"
#include "moescope/kernels/launchers.h"
#include "no_cuda_device.h"

namespace mk = moescope::kernels;
namespace ref = moescope::kernels::reference;

namespace {

void check_cuda(cudaError_t status, const char* what, int line) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "kernels_check.cu:%d: %s failed: %s\n", line, what,
                 cudaGetErrorString(status));
    std::exit(2);
  }
}
void check_cublas(cublasStatus_t status, const char* what, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "kernels_check.cu:%d: %s failed: %s\n", line, what,
                 cublasGetStatusString(status));
    std::exit(2);
  }
}

/// Owns one device allocation.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) check_cuda(cudaMalloc(&data_, bytes_), "cudaMalloc", __LINE__);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  void fill_byte(int value) {
    check_cuda(cudaMemset(data_, value, bytes_), "cudaMemset", __LINE__);
  }
  template <typename T>
  void upload(const std::vector<T>& host) {
    check_cuda(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
               "upload", __LINE__);
  }
  template <typename T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    check_cuda(cudaDeviceSynchronize(), "kernel execution", __LINE__);
    check_cuda(cudaMemcpy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost),
               "download", __LINE__);
    return host;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

constexpr int kFloatSentinelByte = 0xff;  // NaN as float32 and as bf16
constexpr int kIntSentinelByte = 0x7f;    // 0x7f7f7f7f, never a valid index or count

int g_failures = 0;

void report(bool ok, const std::string& name, const std::string& detail) {
  std::printf("  %-4s %-58s %s\n", ok ? "ok" : "FAIL", name.c_str(), detail.c_str());
  if (!ok) ++g_failures;
}

/// Runs one check or measurement; an exception (a launcher's error) is a failure, not an abort.
void run_section(const std::string& name, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& error) {
    report(false, name, std::string("threw: ") + error.what());
  }
}

std::vector<float> to_floats(const std::vector<std::uint16_t>& bits, mk::DType dtype) {
  std::vector<float> out(dtype == mk::DType::kFloat32 ? bits.size() / 2 : bits.size());
  if (dtype == mk::DType::kFloat32) {
    std::memcpy(out.data(), bits.data(), out.size() * 4);
  } else {
    for (std::size_t i = 0; i < bits.size(); ++i) out[i] = mk::bf16_to_float(bits[i]);
  }
  return out;
}

/// Fails on any NaN/Inf mismatch or |gpu - cpu| > atol + rtol * |cpu|.
void compare_floats(const std::string& name, const std::vector<float>& gpu,
                    const std::vector<float>& cpu, double rtol, double atol) {
  std::size_t bad = 0, first_bad = 0;
  double max_error = 0.0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double g = gpu[i], c = cpu[i];
    const bool finite = std::isfinite(g) && std::isfinite(c);
    const double error = finite ? std::fabs(g - c) : INFINITY;
    if (!finite || error > atol + rtol * std::fabs(c)) {
      if (bad++ == 0) first_bad = i;
    }
    if (finite) max_error = std::max(max_error, error);
  }
  char detail[256];
  std::snprintf(
      detail, sizeof(detail), "%zu elements, max abs err %.3g, %zu bad%s", gpu.size(), max_error,
      bad,
      bad ? (" (first at " + std::to_string(first_bad) + ": gpu " + std::to_string(gpu[first_bad]) +
             " cpu " + std::to_string(cpu[first_bad]) + ")")
                .c_str()
          : "");
  report(bad == 0, name, detail);
}

void compare_ints(const std::string& name, const std::vector<std::int32_t>& gpu,
                  const std::vector<std::int32_t>& cpu) {
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i] != cpu[i] && bad++ == 0) first_bad = i;
  }
  std::string detail = std::to_string(gpu.size()) + " values, " + std::to_string(bad) + " differ";
  if (bad)
    detail += " (first at " + std::to_string(first_bad) + ": gpu " +
              std::to_string(gpu[first_bad]) + " cpu " + std::to_string(cpu[first_bad]) + ")";
  report(bad == 0, name, detail);
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t count, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (auto& v : values) v = normal(rng);
  return values;
}

/// Host bytes of `values` in dtype (float32 as is, bf16 rounded).
std::vector<std::uint16_t> encode(const std::vector<float>& values, mk::DType dtype) {
  if (dtype == mk::DType::kFloat32) {
    std::vector<std::uint16_t> bits(values.size() * 2);
    std::memcpy(bits.data(), values.data(), values.size() * 4);
    return bits;
  }
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = mk::float_to_bf16(values[i]);
  return bits;
}

std::size_t halfwords(std::size_t elements, mk::DType dtype) {
  return dtype == mk::DType::kFloat32 ? 2 * elements : elements;
}

/// Milliseconds per call of `body`, averaged over `iterations` after two warm-up calls.
float time_ms(const std::function<void()>& body, int iterations) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  body();
  body();
  cudaEventRecord(start);
  for (int i = 0; i < iterations; ++i) body();
  cudaEventRecord(stop);
  check_cuda(cudaEventSynchronize(stop), "timed region", __LINE__);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iterations;
}

// ------------------------------------------------------------------------------------------
// Correctness

void check_router(std::mt19937& rng, std::int64_t tokens, mk::RouterConfig config, bool with_bias) {
  const std::string label =
      "router T=" + std::to_string(tokens) + " E=" + std::to_string(config.num_experts) +
      " k=" + std::to_string(config.top_k) + " G=" + std::to_string(config.num_groups) +
      (config.score_function == mk::ScoreFunction::kSigmoid ? " sigmoid" : " softmax");
  const int e_count = config.num_experts, k = config.top_k;
  const auto logits = random_floats(rng, tokens * e_count, 2.0f);
  const auto bias = random_floats(rng, e_count, 0.05f);
  std::vector<float> cpu_scores(tokens * e_count), cpu_weights(tokens * k);
  std::vector<std::int32_t> cpu_ids(tokens * k), cpu_counts(e_count);
  ref::router_forward(logits.data(), with_bias ? bias.data() : nullptr, tokens, config,
                      cpu_scores.data(), cpu_ids.data(), cpu_weights.data(), cpu_counts.data());

  DeviceBuffer d_logits(logits.size() * 4), d_bias(bias.size() * 4),
      d_scores(cpu_scores.size() * 4), d_ids(cpu_ids.size() * 4), d_weights(cpu_weights.size() * 4),
      d_counts(e_count * 4);
  d_logits.upload(logits);
  d_bias.upload(bias);
  d_scores.fill_byte(kFloatSentinelByte);
  d_weights.fill_byte(kFloatSentinelByte);
  d_ids.fill_byte(kIntSentinelByte);
  d_counts.fill_byte(kIntSentinelByte);
  mk::launch_router_forward(d_logits.get<float>(), with_bias ? d_bias.get<float>() : nullptr,
                            tokens, config, d_scores.get<float>(), d_ids.get<std::int32_t>(),
                            d_weights.get<float>(), d_counts.get<std::int32_t>(), nullptr);
  const auto gpu_scores = d_scores.download<float>(cpu_scores.size());
  auto gpu_ids = d_ids.download<std::int32_t>(cpu_ids.size());
  const auto gpu_weights = d_weights.download<float>(cpu_weights.size());
  const auto gpu_counts = d_counts.download<std::int32_t>(e_count);
  compare_floats(label + " scores", gpu_scores, cpu_scores, 1e-5, 1e-7);
  // expf differs by an ulp between host and device: a near-tie may swap two experts. Accept a
  // swap only when both selection scores agree within 1e-5; such tokens compare weights loosely.
  std::size_t near_ties = 0, wrong = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const int g = gpu_ids[t * k + j], c = cpu_ids[t * k + j];
      if (g == c) continue;
      if (g < 0 || g >= e_count) {
        ++wrong;
        continue;
      }
      const float sg = cpu_scores[t * e_count + g] + (with_bias ? bias[g] : 0.0f);
      const float sc = cpu_scores[t * e_count + c] + (with_bias ? bias[c] : 0.0f);
      if (std::fabs(sg - sc) <= 1e-5f) {
        ++near_ties;
      } else {
        ++wrong;
      }
    }
  }
  report(wrong == 0, label + " topk_ids",
         std::to_string(wrong) + " wrong, " + std::to_string(near_ties) + " near-tie swaps");
  compare_floats(label + " topk_weights", gpu_weights, cpu_weights, 1e-4, near_ties ? 1e-3 : 1e-6);
  std::vector<std::int32_t> gpu_histogram(e_count, 0);
  for (int id : gpu_ids) {
    if (id >= 0 && id < e_count) ++gpu_histogram[id];
  }
  compare_ints(label + " selections_per_expert (vs its own ids)", gpu_counts, gpu_histogram);

  // Backward, from the GPU's own forward outputs on both sides.
  const auto grad_weights = random_floats(rng, tokens * k);
  const auto grad_scores = random_floats(rng, tokens * e_count);
  std::vector<float> cpu_grad(tokens * e_count);
  ref::router_backward(gpu_scores.data(), gpu_ids.data(), grad_weights.data(), grad_scores.data(),
                       tokens, config, cpu_grad.data());
  DeviceBuffer d_grad_weights(grad_weights.size() * 4), d_grad_scores(grad_scores.size() * 4),
      d_grad_logits(cpu_grad.size() * 4);
  d_grad_weights.upload(grad_weights);
  d_grad_scores.upload(grad_scores);
  d_grad_logits.fill_byte(kFloatSentinelByte);
  mk::launch_router_backward(d_scores.get<float>(), d_ids.get<std::int32_t>(),
                             d_grad_weights.get<float>(), d_grad_scores.get<float>(), tokens,
                             config, d_grad_logits.get<float>(), nullptr);
  compare_floats(label + " backward grad_logits", d_grad_logits.download<float>(cpu_grad.size()),
                 cpu_grad, 1e-4, 1e-6);
}

struct DeviceRouting {
  std::int64_t assignments, capacity;
  std::vector<std::int32_t> destination, sources;  // CPU reference results
};

DeviceRouting check_routing_map(const std::vector<std::int32_t>& ids, int e_count, int alignment,
                                const std::string& label) {
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t capacity = mk::permuted_row_capacity(n, e_count, alignment);
  std::vector<std::int32_t> cpu_tokens(e_count), cpu_offsets(e_count + 1), cpu_destination(n),
      cpu_sources(capacity);
  ref::build_routing_map(ids.data(), n, e_count, alignment, cpu_tokens.data(), cpu_offsets.data(),
                         cpu_destination.data(), cpu_sources.data(), capacity);
  DeviceBuffer d_ids(std::max<std::int64_t>(n, 1) * 4), d_tokens(e_count * 4),
      d_offsets((e_count + 1) * 4), d_destination(std::max<std::int64_t>(n, 1) * 4),
      d_sources(capacity * 4), d_workspace(mk::routing_map_workspace_bytes(n, e_count));
  if (n > 0) d_ids.upload(ids);
  for (DeviceBuffer* b : {&d_tokens, &d_offsets, &d_destination, &d_sources, &d_workspace})
    b->fill_byte(kIntSentinelByte);
  mk::launch_build_routing_map(d_ids.get<std::int32_t>(), n, e_count, alignment, d_workspace.get(),
                               d_workspace.bytes(), d_tokens.get<std::int32_t>(),
                               d_offsets.get<std::int32_t>(), d_destination.get<std::int32_t>(),
                               d_sources.get<std::int32_t>(), capacity, nullptr);
  compare_ints(label + " tokens_per_expert", d_tokens.download<std::int32_t>(e_count), cpu_tokens);
  compare_ints(label + " group_offsets", d_offsets.download<std::int32_t>(e_count + 1),
               cpu_offsets);
  compare_ints(label + " destination_rows", d_destination.download<std::int32_t>(n),
               cpu_destination);
  compare_ints(label + " row_sources", d_sources.download<std::int32_t>(capacity), cpu_sources);
  return {n, capacity, cpu_destination, cpu_sources};
}

std::vector<std::int32_t> random_ids(std::mt19937& rng, std::int64_t count, int used_experts,
                                     double drop) {
  std::uniform_int_distribution<int> expert(0, used_experts - 1);
  std::bernoulli_distribution dropped(drop);
  std::vector<std::int32_t> ids(count);
  for (auto& id : ids) id = dropped(rng) ? -1 : expert(rng);
  return ids;
}

void check_permute_and_combine(std::mt19937& rng, mk::DType dtype, std::int64_t tokens,
                               std::int64_t hidden, int k, int e_count) {
  const std::string label = std::string(mk::dtype_name(dtype)) + " T=" + std::to_string(tokens) +
                            " H=" + std::to_string(hidden) + " k=" + std::to_string(k);
  const auto ids =
      random_ids(rng, tokens * k, std::max(1, e_count - 3), 0.1);  // 3 empty experts, 10% dropped
  const auto routing = check_routing_map(ids, e_count, 8, "  routing for " + label);
  const std::int64_t rows = routing.capacity;
  DeviceBuffer d_destination(routing.assignments * 4), d_sources(rows * 4);
  d_destination.upload(routing.destination);
  d_sources.upload(routing.sources);

  const auto token_bits = encode(random_floats(rng, tokens * hidden), dtype);
  const std::size_t element = mk::dtype_size(dtype);
  DeviceBuffer d_tokens(tokens * hidden * element), d_permuted(rows * hidden * element);
  d_tokens.upload(token_bits);
  d_permuted.fill_byte(kFloatSentinelByte);
  std::vector<std::uint16_t> cpu_permuted(halfwords(rows * hidden, dtype));
  ref::permute_tokens(token_bits.data(), dtype, tokens, hidden, k, routing.sources.data(), rows,
                      cpu_permuted.data());
  mk::launch_permute_tokens(d_tokens.get(), dtype, tokens, hidden, k, d_sources.get<std::int32_t>(),
                            rows, d_permuted.get(), nullptr);
  compare_floats("permute " + label,
                 to_floats(d_permuted.download<std::uint16_t>(cpu_permuted.size()), dtype),
                 to_floats(cpu_permuted, dtype), 0.0, 0.0);

  // Permute backward (unweighted gather-sum).
  const auto grad_permuted = encode(random_floats(rng, rows * hidden), dtype);
  DeviceBuffer d_grad_permuted(rows * hidden * element), d_grad_tokens(tokens * hidden * element);
  d_grad_permuted.upload(grad_permuted);
  d_grad_tokens.fill_byte(kFloatSentinelByte);
  std::vector<std::uint16_t> cpu_grad_tokens(halfwords(tokens * hidden, dtype));
  ref::permute_tokens_backward(grad_permuted.data(), dtype, tokens, hidden, k,
                               routing.destination.data(), cpu_grad_tokens.data());
  mk::launch_permute_tokens_backward(d_grad_permuted.get(), dtype, tokens, hidden, k,
                                     d_destination.get<std::int32_t>(), d_grad_tokens.get(),
                                     nullptr);
  const double rtol =
      dtype == mk::DType::kFloat32 ? 1e-5 : 8e-3;  // bf16: one rounding of a float sum
  compare_floats("permute backward " + label,
                 to_floats(d_grad_tokens.download<std::uint16_t>(cpu_grad_tokens.size()), dtype),
                 to_floats(cpu_grad_tokens, dtype), rtol, 1e-5);

  // Combine forward and backward.
  std::vector<float> weights(tokens * k);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (auto& w : weights) w = uniform(rng);
  DeviceBuffer d_weights(weights.size() * 4), d_output(tokens * hidden * element);
  d_weights.upload(weights);
  d_output.fill_byte(kFloatSentinelByte);
  std::vector<std::uint16_t> cpu_output(halfwords(tokens * hidden, dtype));
  ref::unpermute_combine(grad_permuted.data(), dtype, weights.data(), routing.destination.data(),
                         tokens, hidden, k, cpu_output.data());
  mk::launch_unpermute_combine(d_grad_permuted.get(), dtype, d_weights.get<float>(),
                               d_destination.get<std::int32_t>(), tokens, hidden, k, d_output.get(),
                               nullptr);
  {
    // Determinism: a second run must give the same bits (no float atomics anywhere).
    DeviceBuffer d_again(tokens * hidden * element);
    mk::launch_unpermute_combine(d_grad_permuted.get(), dtype, d_weights.get<float>(),
                                 d_destination.get<std::int32_t>(), tokens, hidden, k,
                                 d_again.get(), nullptr);
    const auto first = d_output.download<std::uint16_t>(halfwords(tokens * hidden, dtype));
    const auto second = d_again.download<std::uint16_t>(halfwords(tokens * hidden, dtype));
    report(first == second, "unpermute_combine bitwise repeatable " + label, "");
  }
  compare_floats("unpermute_combine " + label,
                 to_floats(d_output.download<std::uint16_t>(cpu_output.size()), dtype),
                 to_floats(cpu_output, dtype), rtol, 1e-5);

  const auto grad_output = encode(random_floats(rng, tokens * hidden), dtype);
  DeviceBuffer d_grad_output(tokens * hidden * element), d_grad_expert(rows * hidden * element),
      d_grad_weights(tokens * k * 4);
  d_grad_output.upload(grad_output);
  d_grad_expert.fill_byte(kFloatSentinelByte);
  d_grad_weights.fill_byte(kFloatSentinelByte);
  std::vector<std::uint16_t> cpu_grad_expert(halfwords(rows * hidden, dtype));
  std::vector<float> cpu_grad_weights(tokens * k);
  ref::unpermute_combine_backward(grad_output.data(), grad_permuted.data(), dtype, weights.data(),
                                  routing.destination.data(), routing.sources.data(), rows, tokens,
                                  hidden, k, cpu_grad_expert.data(), cpu_grad_weights.data());
  mk::launch_unpermute_combine_backward(d_grad_output.get(), d_grad_permuted.get(), dtype,
                                        d_weights.get<float>(), d_destination.get<std::int32_t>(),
                                        d_sources.get<std::int32_t>(), rows, tokens, hidden, k,
                                        d_grad_expert.get(), d_grad_weights.get<float>(), nullptr);
  compare_floats("combine backward grad_expert_output " + label,
                 to_floats(d_grad_expert.download<std::uint16_t>(cpu_grad_expert.size()), dtype),
                 to_floats(cpu_grad_expert, dtype), rtol, 1e-6);
  // A dot product over H terms: the warp's summation order differs from the CPU's.
  compare_floats("combine backward grad_topk_weights " + label,
                 d_grad_weights.download<float>(tokens * k), cpu_grad_weights, 1e-3,
                 1e-3 * std::sqrt(static_cast<double>(hidden)));
}

void check_grouped_gemm(std::mt19937& rng, cublasHandle_t handle, mk::DType dtype,
                        bool b_is_n_by_k) {
  const int groups = 6;
  const std::int64_t k = 256, n = 136;
  const std::vector<std::int32_t> offsets = {0,   64,  64, 200,
                                             208, 208, 520};  // empty groups included
  const std::int64_t rows = offsets.back();
  const std::string label =
      std::string("grouped_gemm ") + mk::dtype_name(dtype) + (b_is_n_by_k ? " B[n,k]" : " B[k,n]");
  const std::size_t element = mk::dtype_size(dtype);
  const auto a = encode(random_floats(rng, rows * k), dtype);
  const auto b = encode(random_floats(rng, groups * k * n, 0.1f), dtype);
  DeviceBuffer d_a(rows * k * element), d_b(groups * k * n * element), d_c(rows * n * element),
      d_workspace(mk::grouped_gemm_workspace_bytes(groups));
  d_a.upload(a);
  d_b.upload(b);
  d_c.fill_byte(kFloatSentinelByte);
  std::vector<std::uint16_t> cpu_c(halfwords(rows * n, dtype));
  ref::grouped_gemm(a.data(), b.data(), cpu_c.data(), dtype, groups, offsets.data(), k, n,
                    b_is_n_by_k);
  mk::launch_grouped_gemm_cublas(handle, d_a.get(), d_b.get(), d_c.get(), dtype, groups,
                                 offsets.data(), k, n, b_is_n_by_k, d_workspace.get(),
                                 d_workspace.bytes(), nullptr);
  // float32 inputs may run through TF32 tensor cores in cuBLAS: bound as for bf16 outputs.
  compare_floats(label, to_floats(d_c.download<std::uint16_t>(cpu_c.size()), dtype),
                 to_floats(cpu_c, dtype), 1e-2, 2e-2);
  if (b_is_n_by_k) return;
  const auto grad_c = encode(random_floats(rng, rows * n), dtype);
  DeviceBuffer d_grad_c(rows * n * element), d_grad_b(groups * k * n * element);
  d_grad_c.upload(grad_c);
  d_grad_b.fill_byte(kFloatSentinelByte);
  std::vector<std::uint16_t> cpu_grad_b(halfwords(groups * k * n, dtype));
  ref::grouped_gemm_weight_grad(a.data(), grad_c.data(), cpu_grad_b.data(), dtype, groups,
                                offsets.data(), k, n);
  mk::launch_grouped_gemm_weight_grad_cublas(handle, d_a.get(), d_grad_c.get(), d_grad_b.get(),
                                             dtype, groups, offsets.data(), k, n, d_workspace.get(),
                                             d_workspace.bytes(), nullptr);
  compare_floats(label + " weight_grad",
                 to_floats(d_grad_b.download<std::uint16_t>(cpu_grad_b.size()), dtype),
                 to_floats(cpu_grad_b, dtype), 1e-2, 5e-2);
}

// ------------------------------------------------------------------------------------------
// Performance

struct Row {
  std::string metric, value, baseline, ratio, target;
};
std::vector<Row> g_table;

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

void measure_bandwidth(std::mt19937& rng) {
  // Device-to-device copy: bytes read + bytes written per second.
  const std::size_t copy_bytes = std::size_t(1) << 30;
  DeviceBuffer source(copy_bytes), destination(copy_bytes);
  source.fill_byte(1);
  const float copy_ms = time_ms(
      [&] {
        cudaMemcpyAsync(destination.get(), source.get(), copy_bytes, cudaMemcpyDeviceToDevice);
      },
      20);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  g_table.push_back(
      {"device-to-device cudaMemcpy (read+write)", format("%.0f GB/s", copy_gbs), "", "", ""});

  // DeepSeek-like dispatch: 16k tokens, top-8 of 256 experts, hidden 7168, bf16.
  const std::int64_t tokens = 16384, hidden = 7168;
  const int k = 8, e_count = 256, alignment = 8;
  const auto ids = random_ids(rng, tokens * k, e_count, 0.0);
  const std::int64_t n = tokens * k, rows = mk::permuted_row_capacity(n, e_count, alignment);
  DeviceBuffer d_ids(n * 4), d_tokens_per_expert(e_count * 4), d_offsets((e_count + 1) * 4),
      d_destination(n * 4), d_sources(rows * 4),
      d_workspace(mk::routing_map_workspace_bytes(n, e_count));
  d_ids.upload(ids);
  auto build_map = [&] {
    mk::launch_build_routing_map(
        d_ids.get<std::int32_t>(), n, e_count, alignment, d_workspace.get(), d_workspace.bytes(),
        d_tokens_per_expert.get<std::int32_t>(), d_offsets.get<std::int32_t>(),
        d_destination.get<std::int32_t>(), d_sources.get<std::int32_t>(), rows, nullptr);
  };
  const float map_ms = time_ms(build_map, 50);
  g_table.push_back({"routing map (16k tok x top-8 of 256, align 8)",
                     format("%.1f us", map_ms * 1e3), "", "", ""});

  DeviceBuffer d_tokens(tokens * hidden * 2), d_permuted(rows * hidden * 2),
      d_output(tokens * hidden * 2), d_weights(n * 4);
  d_tokens.fill_byte(0x3c);
  d_weights.fill_byte(0);
  const float permute_ms = time_ms(
      [&] {
        mk::launch_permute_tokens(d_tokens.get(), mk::DType::kBFloat16, tokens, hidden, k,
                                  d_sources.get<std::int32_t>(), rows, d_permuted.get(), nullptr);
      },
      20);
  // n token rows read (one per assignment), every permuted row written (padding rows too).
  const double permute_bytes = (double(n) + rows) * hidden * 2;
  const double permute_gbs = permute_bytes / (permute_ms * 1e-3) / 1e9;
  g_table.push_back({"permute bf16 16k x 7168 top-8", format("%.0f GB/s", permute_gbs),
                     format("%.0f GB/s", copy_gbs),
                     format("%.0f%%", 100.0 * permute_gbs / copy_gbs), ">= 60%"});
  const float combine_ms = time_ms(
      [&] {
        mk::launch_unpermute_combine(d_permuted.get(), mk::DType::kBFloat16, d_weights.get<float>(),
                                     d_destination.get<std::int32_t>(), tokens, hidden, k,
                                     d_output.get(), nullptr);
      },
      20);
  const double combine_bytes =
      (double(n) + tokens) * hidden * 2;  // k rows read + 1 written per token
  const double combine_gbs = combine_bytes / (combine_ms * 1e-3) / 1e9;
  g_table.push_back({"unpermute+combine bf16 16k x 7168 top-8", format("%.0f GB/s", combine_gbs),
                     format("%.0f GB/s", copy_gbs),
                     format("%.0f%%", 100.0 * combine_gbs / copy_gbs), ">= 60%"});
}

void measure_router(std::mt19937& rng) {
  const std::int64_t tokens = 16384;
  for (int deepseek = 0; deepseek < 2; ++deepseek) {
    mk::RouterConfig config;
    config.num_experts = 256;
    config.top_k = 8;
    if (deepseek) {
      config.score_function = mk::ScoreFunction::kSigmoid;
      config.num_groups = 8;
      config.group_top_k = 4;
      config.scaling_factor = 2.5f;
    }
    const auto logits = random_floats(rng, tokens * 256);
    DeviceBuffer d_logits(logits.size() * 4), d_bias(256 * 4), d_scores(logits.size() * 4),
        d_ids(tokens * 8 * 4), d_weights(tokens * 8 * 4), d_counts(256 * 4);
    d_logits.upload(logits);
    d_bias.fill_byte(0);
    const float ms = time_ms(
        [&] {
          mk::launch_router_forward(d_logits.get<float>(), deepseek ? d_bias.get<float>() : nullptr,
                                    tokens, config, d_scores.get<float>(),
                                    d_ids.get<std::int32_t>(), d_weights.get<float>(),
                                    d_counts.get<std::int32_t>(), nullptr);
        },
        50);
    g_table.push_back({deepseek ? "router 16k x 256 top-8 sigmoid+bias+groups 8/4"
                                : "router 16k x 256 top-8 softmax",
                       format("%.1f us", ms * 1e3), "", "", ""});
  }
}

void measure_grouped_gemm(std::mt19937& rng, cublasHandle_t handle) {
  // DeepSeek-like local experts: 32 experts, hidden 7168, ffn 2048; 16k tokens x top-8 spread
  // over 256 experts leaves ~512 rows per local expert (uneven sizes, rounded up to 8).
  const int groups = 32;
  const std::int64_t hidden = 7168, ffn = 2048;
  std::vector<std::int32_t> offsets(groups + 1, 0);
  std::uniform_int_distribution<int> rows_of(256, 768);
  for (int g = 0; g < groups; ++g) offsets[g + 1] = offsets[g] + (rows_of(rng) + 7) / 8 * 8;
  const std::int64_t rows = offsets.back();
  DeviceBuffer d_a(rows * hidden * 2), d_w(groups * hidden * ffn * 2), d_c(rows * ffn * 2),
      d_workspace(mk::grouped_gemm_workspace_bytes(groups)), d_dense_w(hidden * ffn * 2);
  d_a.fill_byte(0x3c);
  d_w.fill_byte(0x3c);
  d_dense_w.fill_byte(0x3c);
  const double flops = 2.0 * rows * hidden * ffn;
  const float grouped_ms = time_ms(
      [&] {
        mk::launch_grouped_gemm_cublas(handle, d_a.get(), d_w.get(), d_c.get(),
                                       mk::DType::kBFloat16, groups, offsets.data(), hidden, ffn,
                                       true, d_workspace.get(), d_workspace.bytes(), nullptr);
      },
      10);
  // Dense baseline: one [rows, hidden] x [hidden, ffn] GEMM (same FLOPs), column-major view.
  const float alpha = 1.0f, beta = 0.0f;
  const float dense_ms = time_ms(
      [&] {
        check_cublas(
            cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(ffn),
                         static_cast<int>(rows), static_cast<int>(hidden), &alpha, d_dense_w.get(),
                         CUDA_R_16BF, static_cast<int>(hidden), d_a.get(), CUDA_R_16BF,
                         static_cast<int>(hidden), &beta, d_c.get(), CUDA_R_16BF,
                         static_cast<int>(ffn), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx", __LINE__);
      },
      10);
  const double grouped_tflops = flops / (grouped_ms * 1e-3) / 1e12,
               dense_tflops = flops / (dense_ms * 1e-3) / 1e12;
  g_table.push_back({"grouped GEMM cuBLAS bf16 32 x [~512,7168]x[7168,2048]",
                     format("%.0f TFLOP/s", grouped_tflops), format("%.0f TFLOP/s", dense_tflops),
                     format("%.0f%%", 100.0 * grouped_tflops / dense_tflops), ">= 60%"});
  const float grad_ms = time_ms(
      [&] {
        mk::launch_grouped_gemm_weight_grad_cublas(
            handle, d_a.get(), d_c.get(), d_w.get(), mk::DType::kBFloat16, groups, offsets.data(),
            hidden, ffn, d_workspace.get(), d_workspace.bytes(), nullptr);
      },
      10);
  const double grad_tflops = flops / (grad_ms * 1e-3) / 1e12;
  g_table.push_back({"grouped GEMM weight grad cuBLAS bf16 (same shapes)",
                     format("%.0f TFLOP/s", grad_tflops), format("%.0f TFLOP/s", dense_tflops),
                     format("%.0f%%", 100.0 * grad_tflops / dense_tflops), ""});
}

}  // namespace

int main(int argc, char** argv) {
  const bool skip_performance = argc > 1 && std::string(argv[1]) == "--correctness-only";
  int device_count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&device_count);
      status != cudaSuccess || device_count == 0) {
    return moescope::device_checks::report_no_cuda_device(
        "kernels_device_check", status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
  }
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties", __LINE__);
  const unsigned seed = std::random_device{}();
  std::printf("kernels_check on %s (sm_%d%d, %d SMs), seed %u\n", properties.name, properties.major,
              properties.minor, properties.multiProcessorCount, seed);
  std::mt19937 rng(seed);
  cublasHandle_t handle;
  check_cublas(cublasCreate(&handle), "cublasCreate", __LINE__);

  std::printf("correctness (GPU vs CPU reference):\n");
  mk::RouterConfig mixtral;
  mixtral.num_experts = 8;
  mixtral.top_k = 2;
  mixtral.normalize_top_k = false;
  mk::RouterConfig odd;
  odd.num_experts = 13;
  odd.top_k = 3;
  mk::RouterConfig deepseek;
  deepseek.num_experts = 256;
  deepseek.top_k = 8;
  deepseek.score_function = mk::ScoreFunction::kSigmoid;
  deepseek.num_groups = 8;
  deepseek.group_top_k = 4;
  deepseek.scaling_factor = 2.5f;
  mk::RouterConfig wide;  // > 48 KiB of shared memory: the opt-in path
  wide.num_experts = 1024;
  wide.top_k = 64;
  wide.num_groups = 1024;
  wide.group_top_k = 100;
  run_section("router mixtral", [&] { check_router(rng, 4099, mixtral, false); });
  run_section("router odd", [&] { check_router(rng, 1001, odd, true); });
  run_section("router deepseek", [&] { check_router(rng, 16384, deepseek, true); });
  run_section("router wide", [&] { check_router(rng, 257, wide, true); });
  run_section("routing_map 16k x 8 of 256", [&] {
    check_routing_map(random_ids(rng, 16384 * 8, 256, 0.0), 256, 8, "routing_map 16k x 8 of 256");
  });
  run_section("routing_map odd", [&] {
    check_routing_map(random_ids(rng, 12345, 10, 0.2), 13, 1,
                      "routing_map odd, 3 empty experts, 20% dropped");
  });
  run_section("routing_map one expert", [&] {
    check_routing_map(std::vector<std::int32_t>(5000, 6), 7, 16,
                      "routing_map one expert takes all");
  });
  run_section("routing_map empty",
              [&] { check_routing_map({}, 5, 8, "routing_map no assignments"); });
  for (mk::DType dtype : {mk::DType::kFloat32, mk::DType::kBFloat16}) {
    const std::string name = mk::dtype_name(dtype);
    run_section("permute/combine vectorized " + name,
                [&] { check_permute_and_combine(rng, dtype, 2048, 7168, 8, 64); });
    run_section("permute/combine element-wise " + name,
                [&] { check_permute_and_combine(rng, dtype, 333, 37, 3, 11); });
    run_section("permute/combine one token " + name,
                [&] { check_permute_and_combine(rng, dtype, 1, 64, 1, 1); });
    for (bool b_is_n_by_k : {false, true}) {
      run_section("grouped_gemm " + name,
                  [&] { check_grouped_gemm(rng, handle, dtype, b_is_n_by_k); });
    }
  }
  std::printf("%d correctness failure(s)\n", g_failures);

  if (!skip_performance) {
    run_section("bandwidth", [&] { measure_bandwidth(rng); });
    run_section("router timing", [&] { measure_router(rng); });
    run_section("grouped GEMM timing", [&] { measure_grouped_gemm(rng, handle); });
    std::printf(
        "\n| kernels on %s | achieved | baseline | ratio | target |\n|---|---|---|---|---|\n",
        properties.name);
    for (const auto& row : g_table) {
      std::printf("| %s | %s | %s | %s | %s |\n", row.metric.c_str(), row.value.c_str(),
                  row.baseline.c_str(), row.ratio.c_str(), row.target.c_str());
    }
  }
  cublasDestroy(handle);
  return g_failures == 0 ? 0 : 1;
}
