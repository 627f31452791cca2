#include "moescope/runtime/moe_instrumentation.h"

#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <iterator>
#include <mutex>
#include <numeric>

#include "moescope/recorder.h"

namespace moescope::runtime {
namespace {

std::atomic<int64_t> g_training_step{0};

nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA("moescope");
  return domain;
}

// Registered once per phase so NVTX tools compare handles, not strings.
nvtxStringHandle_t nvtx_phase_string(MoEPhase phase) {
  static nvtxStringHandle_t handles[kNumMoEPhases] = {};
  static std::once_flag once;
  std::call_once(once, [] {
    for (int p = 0; p < kNumMoEPhases; ++p) {
      handles[p] = nvtxDomainRegisterStringA(nvtx_domain(), phase_name(static_cast<MoEPhase>(p)));
    }
  });
  return handles[static_cast<int>(phase)];
}

}  // namespace

const char* phase_name(MoEPhase phase) {
  static constexpr const char* kNames[] = {"moe.layer",        "moe.route",    "moe.permute",
                                           "moe.dispatch_a2a", "moe.experts",  "moe.shared_experts",
                                           "moe.combine_a2a",  "moe.unpermute"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kNames) == kNumMoEPhases);
  const int index = static_cast<int>(phase);
  return index >= 0 && index < kNumMoEPhases ? kNames[index] : "moe.unknown";
}

bool is_trace_recording() {
  return moescope_recording != 0;
}

PhaseRange::PhaseRange(MoEPhase phase) {
  // One range per phase. While our recorder runs it records the span itself: an NVTX range
  // would reach moescope's own NVTX injection too and appear twice. Otherwise NVTX tells
  // whichever tool listens (Nsight Systems).
  if (is_trace_recording()) {
    // Interned per use: ids belong to one recording, and a recorder may restart.
    moescope_span_begin(moescope_intern("moescope"), moescope_intern(phase_name(phase)));
    open_ = Open::kRecorderSpan;
    return;
  }
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attributes.message.registered = nvtx_phase_string(phase);
  nvtxDomainRangePushEx(nvtx_domain(), &attributes);
  open_ = Open::kNvtxRange;
}

PhaseRange::~PhaseRange() {
  if (open_ == Open::kRecorderSpan) {
    moescope_span_end();
  } else {
    nvtxDomainRangePop(nvtx_domain());
  }
}

void set_training_step(int64_t step) {
  g_training_step.store(step);
  moescope_step(step);
}

int64_t current_training_step() {
  return g_training_step.load();
}

CommunicationRecord::CommunicationRecord(const char* name, int rank, int num_ranks,
                                         const std::vector<int64_t>& split_rows, int64_t row_bytes,
                                         const at::Tensor& like)
    : active_(is_trace_recording()), name_(name), rank_(rank), num_ranks_(num_ranks) {
  if (!active_) return;
  split_bytes_.reserve(split_rows.size());
  for (int64_t rows : split_rows) split_bytes_.push_back(static_cast<uint64_t>(rows * row_bytes));
  dtype_ = static_cast<uint32_t>(like.scalar_type()) + 100;  // torch ScalarType + 100
  device_ = like.is_cuda() ? static_cast<int32_t>(like.get_device()) : -1;
  kind_ = MOESCOPE_COMM_ALL_TO_ALL;
  start_ns_ = moescope_now_ns();
}

CommunicationRecord::CommunicationRecord(const char* name, int rank, int num_ranks,
                                         const at::Tensor& tensor)
    : active_(is_trace_recording()), name_(name), rank_(rank), num_ranks_(num_ranks) {
  if (!active_) return;
  kind_ = MOESCOPE_COMM_ALL_REDUCE;
  reduce_bytes_ = static_cast<uint64_t>(tensor.nbytes());
  count_ = static_cast<uint64_t>(tensor.numel());
  dtype_ = static_cast<uint32_t>(tensor.scalar_type()) + 100;  // torch ScalarType + 100
  device_ = tensor.is_cuda() ? static_cast<int32_t>(tensor.get_device()) : -1;
  start_ns_ = moescope_now_ns();
}

void CommunicationRecord::finish() {
  if (!active_) return;
  moescope_comm_op_info op{};
  op.kind = kind_;
  op.dtype = dtype_;
  op.bytes = kind_ == MOESCOPE_COMM_ALL_REDUCE
                 ? reduce_bytes_
                 : std::accumulate(split_bytes_.begin(), split_bytes_.end(), uint64_t{0});
  op.count = count_;
  op.rank = rank_;
  op.num_ranks = num_ranks_;
  op.peer = -1;
  op.root = -1;
  op.device = device_;
  op.enqueue_ns = start_ns_;
  op.start_ns = start_ns_;
  op.end_ns = moescope_now_ns();  // the host waited for completion
  op.split_bytes = split_bytes_.data();
  op.num_splits = static_cast<uint32_t>(split_bytes_.size());
  op.name = moescope_intern(name_);
  moescope_comm_op(&op);
  active_ = false;
}

}  // namespace moescope::runtime
