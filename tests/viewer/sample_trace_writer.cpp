#include "sample_trace_writer.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

#include "moescope/recorder.h"
#include "moescope/trace/trace_writer.h"

namespace moescope::viewer::testing {

using namespace moescope::trace;

namespace {

enum StringId : uint32_t {
  kMainThread = 1,
  kGpuThread,
  kTrainStep,
  kForward,
  kBackward,
  kRouter,
  kDispatch,
  kExperts,
  kCombine,
  kLaunch,
  kRouterKernel,
  kGemmKernel,
  kCombineKernel,
  kAllToAll,
  kLossCounter,
  kFirstLayerName  // "moe_layer 0", "moe_layer 1", ...
};

class RankWriter {
 public:
  RankWriter(const std::string& path, int rank, const SampleTraceShape& shape)
      : rank_(rank), shape_(shape), random_(shape.seed * 7919 + static_cast<uint64_t>(rank)) {
    std::string metadata = "{\"rank\":" + std::to_string(rank) +
                           ",\"world_size\":" + std::to_string(shape.num_ranks) +
                           ",\"host\":\"synthetic\",\"pid\":" + std::to_string(1000 + rank) + "}";
    if (!writer_.open(path, metadata)) throw std::runtime_error(writer_.error());
    const char* names[] = {"",
                           "main",
                           "cupti",
                           "train_step",
                           "forward",
                           "backward",
                           "router",
                           "dispatch",
                           "experts",
                           "combine",
                           "cudaLaunchKernel",
                           "router_topk_kernel",
                           "grouped_gemm_kernel",
                           "combine_kernel",
                           "all_to_all",
                           "loss"};
    for (uint32_t id = 1; id < kFirstLayerName; ++id) cpu_.define_string(id, names[id]);
    for (int layer = 0; layer < shape.num_layers; ++layer) {
      cpu_.define_string(kFirstLayerName + static_cast<uint32_t>(layer),
                         "moe_layer " + std::to_string(layer));
    }
    cpu_.append<ThreadInfoRecord>(RecordKind::kThreadInfo, 0, kMainThread).os_thread_id =
        4000 + static_cast<uint32_t>(rank);
    gpu_.append<ThreadInfoRecord>(RecordKind::kThreadInfo, 0, kGpuThread).os_thread_id =
        5000 + static_cast<uint32_t>(rank);
  }

  uint64_t write() {
    const int64_t origin = 1'000'000'000;
    allocate(origin, 0x10000000, 512ull << 20, MOESCOPE_MEM_EXPERT_WEIGHTS, false);
    allocate(origin, 0x30000000, 256ull << 20, MOESCOPE_MEM_OPTIMIZER_STATE, false);
    for (int step = 0; step < shape_.num_steps; ++step) {
      int64_t t = origin + 1000 + step * shape_.step_ns;
      cpu_.append<StepRecord>(RecordKind::kStep, static_cast<uint64_t>(t)).step = step;
      begin(t, kTrainStep);
      int64_t phase_ns = shape_.step_ns * 9 / 10 / (2 * shape_.num_layers);
      for (int pass = 0; pass < 2; ++pass) {
        begin(t + 10, pass == 0 ? kForward : kBackward);
        for (int layer = 0; layer < shape_.num_layers; ++layer) {
          int64_t layer_start = t + 20 + layer * phase_ns;
          write_layer(step, layer, layer_start, phase_ns - 40, pass == 0);
        }
        t += shape_.num_layers * phase_ns;
        end(t);
        t += 20;
      }
      auto& loss =
          cpu_.append<CounterRecord>(RecordKind::kCounter, static_cast<uint64_t>(t), kLossCounter);
      loss.value = 3.0 / (1.0 + 0.3 * step);
      end(origin + (step + 1) * shape_.step_ns);
      flush_if_large();
    }
    writer_.write_chunk(1, cpu_.bytes());
    writer_.write_chunk(2, gpu_.bytes());
    writer_.close();
    return events_;
  }

 private:
  void begin(int64_t time, uint32_t name) {
    cpu_.append<SpanBeginRecord>(RecordKind::kSpanBegin, static_cast<uint64_t>(time), name);
    ++events_;
  }
  void end(int64_t time) {
    cpu_.append<SpanEndRecord>(RecordKind::kSpanEnd, static_cast<uint64_t>(time));
  }

  void allocate(int64_t time, uint64_t address, uint64_t bytes, uint16_t category, bool is_free) {
    auto& memory = cpu_.append<MemoryRecord>(RecordKind::kMemory, static_cast<uint64_t>(time));
    memory.address = address;
    memory.bytes = bytes;
    memory.device = 0;
    memory.category = category;
    memory.is_free = is_free ? 1 : 0;
  }

  void launch(int64_t time, uint32_t kernel_name, int64_t duration) {
    uint32_t correlation = ++correlation_;
    auto& call =
        cpu_.append<ApiCallRecord>(RecordKind::kApiCall, static_cast<uint64_t>(time), kLaunch);
    call.end_time = static_cast<uint64_t>(time + 3000);
    call.correlation_id = correlation;
    int64_t gpu_start = std::max(time + 8000, gpu_free_);
    auto& kernel = gpu_.append<GpuKernelRecord>(RecordKind::kGpuKernel,
                                                static_cast<uint64_t>(gpu_start), kernel_name);
    kernel.end_time = static_cast<uint64_t>(gpu_start + duration);
    kernel.correlation_id = correlation;
    kernel.stream = 7;
    kernel.grid[0] = 132;
    kernel.grid[1] = kernel.grid[2] = 1;
    kernel.block[0] = 256;
    kernel.block[1] = kernel.block[2] = 1;
    kernel.registers_per_thread = 96;
    gpu_free_ = gpu_start + duration;
    events_ += 1;
  }

  void all_to_all(int64_t start, int64_t duration, int layer, bool combine) {
    uint32_t num_ranks = static_cast<uint32_t>(shape_.num_ranks);
    auto& op = cpu_.append_sized<CommOpRecord>(RecordKind::kCommOp, static_cast<uint64_t>(start),
                                               kAllToAll, num_ranks * 8);
    op.start_time = static_cast<uint64_t>(start + 2000);
    op.end_time = static_cast<uint64_t>(start + duration);
    op.comm_id = 0xe9;
    op.kind = MOESCOPE_COMM_ALL_TO_ALL;
    op.rank = rank_;
    op.num_ranks = shape_.num_ranks;
    op.peer = -1;
    op.root = -1;
    op.sequence = static_cast<uint32_t>(layer * 2 + (combine ? 1 : 0));
    op.num_splits = num_ranks;
    uint64_t total = 0;
    uint8_t* tail = cpu_.tail<CommOpRecord>();
    for (uint32_t peer = 0; peer < num_ranks; ++peer) {
      // The hot expert lives on the last rank: everybody sends it more.
      uint64_t bytes =
          (1ull << 20) * (peer == num_ranks - 1 ? 3 : 1) + 4096 * static_cast<uint64_t>(rank_);
      std::memcpy(tail + peer * 8, &bytes, 8);
      total += bytes;
    }
    op.bytes = total;
    ++events_;
  }

  void write_layer(int step, int layer, int64_t start, int64_t length, bool forward) {
    begin(start, kFirstLayerName + static_cast<uint32_t>(layer));
    int64_t quarter = length / 4;
    // router
    begin(start + 10, kRouter);
    launch(start + 100, kRouterKernel, quarter / 3);
    end(start + quarter);
    // dispatch all-to-all
    begin(start + quarter + 10, kDispatch);
    uint64_t activations = 0x50000000ull + static_cast<uint64_t>(layer) * 0x1000000;
    if (forward)
      allocate(start + quarter + 20, activations, (24ull + 4 * layer) << 20,
               MOESCOPE_MEM_ACTIVATIONS, false);
    all_to_all(start + quarter + 50, quarter - 200, layer, false);
    end(start + 2 * quarter);
    // experts: grouped GEMM pieces
    begin(start + 2 * quarter + 10, kExperts);
    for (int k = 0; k < shape_.kernels_per_layer; ++k) {
      launch(start + 2 * quarter + 100 + k * (quarter / (shape_.kernels_per_layer + 1)),
             kGemmKernel, quarter / (shape_.kernels_per_layer + 2));
    }
    end(start + 3 * quarter);
    // combine
    begin(start + 3 * quarter + 10, kCombine);
    if (!forward)
      allocate(start + 3 * quarter + 20, activations, 0, MOESCOPE_MEM_ACTIVATIONS, true);
    all_to_all(start + 3 * quarter + 50, quarter / 2, layer, true);
    launch(start + 3 * quarter + quarter / 2 + 100, kCombineKernel, quarter / 4);
    end(start + length - 10);
    end(start + length);
    if (forward) write_expert_load(step, layer, start + length);
  }

  void write_expert_load(int step, int layer, int64_t time) {
    uint32_t experts = static_cast<uint32_t>(shape_.num_experts);
    auto& load = cpu_.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad,
                                                     static_cast<uint64_t>(time), 0, experts * 4);
    load.step = step;
    load.layer = static_cast<uint32_t>(layer);
    load.rank = rank_;
    load.scope = MOESCOPE_EXPERTS_LOCAL;
    load.num_experts = experts;
    uint8_t* tail = cpu_.tail<ExpertLoadRecord>();
    std::vector<float> predicted(experts);
    for (uint32_t e = 0; e < experts; ++e) {
      uint32_t tokens = 200 + static_cast<uint32_t>(random_() % 120);
      if (layer == shape_.hot_layer && static_cast<int>(e) == shape_.hot_expert) tokens *= 6;
      std::memcpy(tail + e * 4, &tokens, 4);
      predicted[e] = static_cast<float>(tokens) * 0.9f;
    }
    auto& values = cpu_.append_sized<ExpertValuesRecord>(
        RecordKind::kExpertValues, static_cast<uint64_t>(time), 0, experts * 4);
    values.step = step;
    values.layer = static_cast<uint32_t>(layer);
    values.rank = rank_;
    values.quantity = MOESCOPE_QUANTITY_PREDICTED_LOAD;
    values.num_experts = experts;
    std::memcpy(cpu_.tail<ExpertValuesRecord>(), predicted.data(), experts * 4);
    if (step == shape_.num_steps / 2 && layer == shape_.hot_layer) {
      auto& rebalance =
          cpu_.append<RebalanceRecord>(RecordKind::kRebalance, static_cast<uint64_t>(time));
      rebalance.step = step;
      rebalance.layer = static_cast<uint32_t>(layer);
      rebalance.rank = rank_;
      rebalance.imbalance_before = 4.8f;
      rebalance.imbalance_after = 1.6f;
      rebalance.bytes_moved = 96ull << 20;
      rebalance.applied = 1;
    }
  }

  void flush_if_large() {
    if (cpu_.size() > (4u << 20)) {
      writer_.write_chunk(1, cpu_.bytes());
      cpu_.clear();
    }
    if (gpu_.size() > (4u << 20)) {
      writer_.write_chunk(2, gpu_.bytes());
      gpu_.clear();
    }
  }

  int rank_;
  SampleTraceShape shape_;
  std::mt19937_64 random_;
  TraceWriter writer_;
  RecordBuffer cpu_, gpu_;
  uint32_t correlation_ = 0;
  int64_t gpu_free_ = 0;
  uint64_t events_ = 0;
};

}  // namespace

SampleTrace write_sample_trace(const std::string& directory, const SampleTraceShape& shape) {
  SampleTrace trace;
  for (int rank = 0; rank < shape.num_ranks; ++rank) {
    std::string path = directory + "/sample." + std::to_string(rank) + ".moetrace";
    RankWriter writer(path, rank, shape);
    trace.timeline_events += writer.write();
    trace.files.push_back(path);
  }
  return trace;
}

}  // namespace moescope::viewer::testing
