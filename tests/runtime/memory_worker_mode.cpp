// moe_ep_worker's "memory" mode: the memory manager inside an expert-parallel MoELayer.
//   pool   a layer with a DispatchBufferPool computes what the plain layer computes; after
//          warm-up and one reservation from the rows seen, more steps allocate nothing.
//          "POOL rank=... output_diff=... grad_diff=... allocations_after_warmup=...
//          growths_after_warmup=... reuses=..."
//   cap    cold start: a router skewed onto rank 0's experts and a receive cap. Every rank's
//          experts get at most the cap, the excess is dropped and counted; with the kFail policy
//          every rank throws (none is left waiting). "CAP rank=... received=... dropped=..."
//          and "CAP_FAIL rank=... message=..."
#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>

#include "moescope/runtime/moe_layer.h"
#include "worker_modes.h"

using namespace moescope::runtime;

namespace {

MoEConfig base_config() {
  MoEConfig config;
  config.hidden_size = 16;
  config.ffn_hidden_size = 12;
  config.num_experts = 8;
  config.top_k = 2;
  config.init_std = 0.3;
  return config;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>();
}

void check_pool(const ExpertParallelGroup& group) {
  const int64_t rank = group.rank();
  MoEConfig config = base_config();
  torch::manual_seed(99);
  MoELayer plain(config, group);
  config.use_dispatch_buffer_pool = true;
  torch::manual_seed(99);
  MoELayer pooled(config, group);
  double output_diff = 0, grad_diff = 0, max_rows = 0;
  int64_t allocations_after_warmup = 0, growths_after_warmup = 0;
  const int kWarmup = 4, kSteps = 16;
  for (int step = 0; step < kSteps; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(77 * step + rank);
    const at::Tensor input = at::randn({64, config.hidden_size}, generator);
    at::Tensor x_plain = input.clone().requires_grad_(true);
    at::Tensor x_pooled = input.clone().requires_grad_(true);
    const MoEOutput a = plain->forward(x_plain);
    const MoEOutput b = pooled->forward(x_pooled);
    a.output.square().sum().backward();
    b.output.square().sum().backward();
    output_diff = std::max(output_diff, max_diff(a.output.detach(), b.output.detach()));
    grad_diff = std::max(grad_diff, max_diff(x_plain.grad(), x_pooled.grad()));
    grad_diff = std::max(grad_diff,
                         max_diff(plain->experts->w_down.grad(), pooled->experts->w_down.grad()));
    const auto& stats = pooled->dispatch_buffer_pool()->stats();
    max_rows = std::max(max_rows, static_cast<double>(stats.high_water_rows));
    if (step == kWarmup - 1) {
      pooled->reserve_dispatch_buffers(max_rows);  // the forecast: what warm-up saw
      allocations_after_warmup = -stats.allocations;
      growths_after_warmup = -stats.growths;
    }
  }
  const auto& stats = pooled->dispatch_buffer_pool()->stats();
  allocations_after_warmup += stats.allocations;
  growths_after_warmup += stats.growths;
  std::cout << "POOL rank=" << rank << " output_diff=" << output_diff << " grad_diff=" << grad_diff
            << " allocations_after_warmup=" << allocations_after_warmup
            << " growths_after_warmup=" << growths_after_warmup << " reuses=" << stats.reuses
            << " allocations=" << stats.allocations << std::endl;
}

MoEConfig cold_start_config(ReceiveCapPolicy policy) {
  MoEConfig config = base_config();
  config.gate_logit_skew = make_gate_skew(8, 8.0);  // experts 0-3 (rank 0 of 2) take nearly all
  config.receive_cap_rows = 60;
  config.receive_cap_policy = policy;
  return config;
}

void check_cap(const ExpertParallelGroup& group) {
  const int64_t rank = group.rank();
  torch::manual_seed(5);
  MoELayer layer(cold_start_config(ReceiveCapPolicy::kDropLowestProbability), group);
  int64_t received = 0, dropped = 0;
  bool finite = true;
  for (int step = 0; step < 3; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(31 * step + rank);
    at::Tensor x = at::randn({64, 16}, generator).requires_grad_(true);
    const MoEOutput out = layer->forward(x);
    out.output.square().sum().backward();
    received = std::max(received, out.num_received_rows);
    dropped += out.num_dropped_by_receive_cap;
    finite = finite && out.output.isfinite().all().item<bool>() &&
             x.grad().isfinite().all().item<bool>();
  }
  std::cout << "CAP rank=" << rank << " received=" << received << " dropped=" << dropped
            << " finite=" << finite << std::endl;

  MoELayer strict(cold_start_config(ReceiveCapPolicy::kFail), group);
  try {
    strict->forward(at::randn({64, 16}));
    std::cout << "CAP_NO_FAIL rank=" << rank << std::endl;
  } catch (const c10::Error& error) {
    std::string message = error.what_without_backtrace();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cout << "CAP_FAIL rank=" << rank << " message=" << message << std::endl;
  }
}

}  // namespace

int run_memory(const ExpertParallelGroup& group) {
  check_pool(group);
  check_cap(group);
  return 0;
}
