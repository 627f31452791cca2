// c10d collectives into the trace (see capture_parts.h and docs/capture.md).
//
// Every torch.distributed collective, also those issued from C++ (DDP's gradient buckets, FSDP),
// is a call of a `c10d::` dispatcher operator (c10d::allreduce_, c10d::alltoall_base_, ...)
// whose arguments hold the tensors, the ProcessGroup, split sizes, root and peer. A boxed kernel
// registered for those operators alone at dispatch key ADInplaceOrView (where they otherwise
// fall through) reads them and redispatches: ordinary operators pay nothing, unlike a global
// RecordFunction callback on every operator (about 6% of a small CPU model's step here), and
// torch 2.11's Gloo backend does not emit RECORD_PARAM_COMMS at all.
//
// Timing: the kernel pushes a PendingCollective (a torch::ParamCommsDebugInfo) as the thread's
// PARAM_COMMS_INFO while the backend enqueues the work. Backends that run the work elsewhere
// propagate the thread-local state to it (Gloo's worker threads run "gloo:all_reduce" etc. as
// user-scope RecordFunctions under it), so a user-scope callback links those ranges to the
// collective: their start and end become the op's start and end, and each is also a span on the
// worker's track. The op is written when the PendingCollective is released, i.e. after the work
// finished and its handle was dropped; without an execution range its end is "unknown".
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "capture_parts.h"
#include "collective_classification.h"
#include "record_function_callback.h"
#include "recorder_binding.h"

namespace moescope::torch_capture {
namespace {

constexpr uint32_t kTorchScalarTypeBase = 100;  // recorder.h: dtype = torch ScalarType + 100

moescope_name_t c10d_domain() {
  static const moescope_name_t id = moescope_intern("c10d");
  return id;
}

// One communication op in flight: what the kernel read, plus the execution times the backend's
// RecordFunctions report. Written to the trace by the destructor (see the file comment).
class PendingCollective final : public torch::ParamCommsDebugInfo {
 public:
  PendingCollective(torch::ParamCommsDebugInfo description, const moescope_comm_op_info& op,
                    std::vector<uint64_t> split_bytes, bool write_op)
      : torch::ParamCommsDebugInfo(std::move(description)),
        op_(op),
        split_bytes_(std::move(split_bytes)),
        write_op_(write_op) {}
  PendingCollective(const PendingCollective&) = delete;
  PendingCollective& operator=(const PendingCollective&) = delete;

  ~PendingCollective() override {
    if (!write_op_ || !moescope_recording) return;
    moescope_comm_op_info op = op_;
    const uint64_t start = execution_start_.load(std::memory_order_acquire);
    const uint64_t end = execution_end_.load(std::memory_order_acquire);
    op.start_ns = start ? start : op.enqueue_ns;
    op.end_ns = end >= op.start_ns ? end : 0;  // 0: the backend reported no execution
    op.split_bytes = split_bytes_.empty() ? nullptr : split_bytes_.data();
    op.num_splits = static_cast<uint32_t>(split_bytes_.size());
    moescope_comm_op(&op);
  }

  moescope_name_t op_name_id() const { return op_.name; }

  // Several ranges may run one collective (coalesced work): the op spans all of them.
  void note_execution_start(uint64_t ns) {
    uint64_t seen = execution_start_.load(std::memory_order_relaxed);
    while ((seen == 0 || ns < seen) &&
           !execution_start_.compare_exchange_weak(seen, ns, std::memory_order_acq_rel)) {
    }
  }
  void note_execution_end(uint64_t ns) {
    uint64_t seen = execution_end_.load(std::memory_order_relaxed);
    while (ns > seen &&
           !execution_end_.compare_exchange_weak(seen, ns, std::memory_order_acq_rel)) {
    }
  }

 private:
  const moescope_comm_op_info op_;
  const std::vector<uint64_t> split_bytes_;
  const bool write_op_;
  std::atomic<uint64_t> execution_start_{0};
  std::atomic<uint64_t> execution_end_{0};
};

PendingCollective* current_pending_collective() {
  return dynamic_cast<PendingCollective*>(
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PARAM_COMMS_INFO));
}

// Per communicator: the next sequence number, and whether its description was written yet.
class CommunicatorRegistry {
 public:
  // The sequence number of the next op of `comm_id`; `first` says it is the first one seen.
  uint32_t next_sequence(uint64_t comm_id, bool* first) {
    std::lock_guard lock(mutex_);
    auto [entry, inserted] = next_.try_emplace(comm_id, 0u);
    *first = inserted;
    return entry->second++;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, uint32_t> next_;
};

struct CaptureState {
  std::unique_ptr<torch::Library> kernels;
  at::CallbackHandle execution_callback = 0;
  CommunicatorRegistry communicators;
  std::atomic<bool> nccl_left_to_shim{false};
  std::atomic<bool> warned_unreadable{false};
};

// Leaked on purpose: a static destructor would deregister kernels after torch's dispatcher
// itself may be gone at exit.
CaptureState& state() {
  static CaptureState* const instance = new CaptureState();
  return *instance;
}

// Calls `visit` for each defined tensor of a Tensor, Tensor[], Tensor?[] or Tensor[][] value.
template <typename Visit>
void for_each_tensor(const c10::IValue& value, const Visit& visit) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (tensor.defined()) visit(tensor);
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector()) {
      if (tensor.defined()) visit(tensor);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) for_each_tensor(element, visit);
  }
}

// Fake, meta and symbolic-shape tensors come from tracing (torch.compile), not communication.
bool is_traced_tensor(const at::Tensor& tensor) {
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  return tensor.is_meta() || impl->is_python_dispatch() || impl->has_symbolic_sizes_strides();
}

struct TensorTotals {
  uint64_t bytes = 0;
  uint64_t elements = 0;
  std::vector<uint64_t> bytes_per_tensor;
};

TensorTotals totals_of(const c10::IValue& value) {
  TensorTotals totals;
  for_each_tensor(value, [&](const at::Tensor& tensor) {
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    totals.bytes += bytes;
    totals.elements += static_cast<uint64_t>(tensor.numel());
    totals.bytes_per_tensor.push_back(bytes);
  });
  return totals;
}

int argument_index(const std::vector<std::string>& names, std::string_view wanted) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == wanted) return static_cast<int>(i);
  }
  return -1;
}

std::string backend_name(c10d::ProcessGroup& group, c10::DeviceType device_type) {
  try {
    auto backend = group.getBackend(device_type);
    if (backend) return backend->getBackendName();
  } catch (const std::exception&) {
    // A group without a backend for this device: fall back to its default backend's name.
  }
  return group.getBackendName();
}

void write_group_description(const c10d::ProcessGroup& group, const std::string& backend,
                             uint64_t comm_id) {
  char text[512];
  std::snprintf(text, sizeof(text), "process group %s \"%s\" %s: rank %d of %d, comm %016" PRIx64,
                group.getGroupName().c_str(), group.getGroupDesc().c_str(), backend.c_str(),
                group.getRank(), group.getSize(), comm_id);
  moescope_instant(c10d_domain(), moescope_intern(text));
}

// What the collective on `stack` sends, and for whom; nullptr for a traced (fake) call.
std::shared_ptr<PendingCollective> describe_collective(const c10::OperatorHandle& op,
                                                       const torch::jit::Stack& stack,
                                                       uint64_t enqueue_ns) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_arguments = schema.arguments().size();
  if (stack.size() < num_arguments) return nullptr;
  std::vector<std::string> names;
  names.reserve(num_arguments);
  for (const c10::Argument& argument : schema.arguments()) names.push_back(argument.name());
  auto arguments = torch::jit::last(stack, num_arguments);

  const int group_index = argument_index(names, "process_group");
  if (group_index < 0) return nullptr;
  auto group = arguments[group_index].toCustomClass<c10d::ProcessGroup>();

  bool traced = false;
  at::Tensor first_tensor;
  for (const c10::IValue& argument : arguments) {
    for_each_tensor(argument, [&](const at::Tensor& tensor) {
      traced |= is_traced_tensor(tensor);
      if (!first_tensor.defined()) first_tensor = tensor;
    });
  }
  if (traced) return nullptr;

  const std::string& operator_name = schema.name();
  moescope_comm_op_info info{};
  info.enqueue_ns = enqueue_ns;
  info.kind = collective_kind(operator_name);
  const int sent_index = sent_argument_index(info.kind, names);
  const int received_index = received_argument_index(names);
  TensorTotals sent = sent_index >= 0 ? totals_of(arguments[sent_index]) : TensorTotals{};
  TensorTotals received =
      received_index >= 0 ? totals_of(arguments[received_index]) : TensorTotals{};
  at::Tensor sent_tensor;
  if (sent_index >= 0) {
    for_each_tensor(arguments[sent_index], [&](const at::Tensor& tensor) {
      if (!sent_tensor.defined()) sent_tensor = tensor;
    });
  }
  const at::Tensor& like = sent_tensor.defined() ? sent_tensor : first_tensor;
  const c10::DeviceType device_type = like.defined() ? like.device().type() : c10::DeviceType::CPU;
  const std::string backend = backend_name(*group, device_type);

  std::vector<int64_t> input_splits;
  std::vector<int64_t> output_splits;
  std::vector<uint64_t> split_bytes;
  if (info.kind == MOESCOPE_COMM_ALL_TO_ALL) {
    const int input_splits_index = argument_index(names, "input_split_sizes");
    const int output_splits_index = argument_index(names, "output_split_sizes");
    if (input_splits_index >= 0) input_splits = arguments[input_splits_index].toIntVector();
    if (output_splits_index >= 0) output_splits = arguments[output_splits_index].toIntVector();
    if (input_splits_index >= 0 && sent_tensor.defined()) {
      const int64_t rows = sent_tensor.dim() > 0 ? sent_tensor.size(0) : 0;
      split_bytes = all_to_all_split_bytes(input_splits, rows, sent.bytes, group->getSize());
    } else if (sent.bytes_per_tensor.size() == static_cast<size_t>(group->getSize())) {
      split_bytes = sent.bytes_per_tensor;  // alltoall_: one tensor per destination
    }
  }

  const int root_index = argument_index(names, "root_rank");
  int peer_index = argument_index(names, "dst");
  if (peer_index < 0) peer_index = argument_index(names, "src");
  info.root = root_index >= 0 ? static_cast<int32_t>(arguments[root_index].toInt()) : -1;
  info.peer = peer_index >= 0 ? static_cast<int32_t>(arguments[peer_index].toInt()) : -1;
  info.count = sent.elements;
  info.bytes = sent.bytes;
  info.dtype =
      like.defined() ? static_cast<uint32_t>(like.scalar_type()) + kTorchScalarTypeBase : 0;
  info.rank = group->getRank();
  info.num_ranks = group->getSize();
  info.device = device_type == c10::DeviceType::CPU || !like.defined()
                    ? -1
                    : static_cast<int32_t>(like.device().index());
  info.comm_id = process_group_comm_id(group->getGroupName(), backend);
  const std::string display_name = collective_display_name(operator_name);
  info.name = moescope_intern(display_name.c_str());

  bool first_of_group = false;
  info.sequence = state().communicators.next_sequence(info.comm_id, &first_of_group);
  if (first_of_group) write_group_description(*group, backend, info.comm_id);

  // NCCL ops are recorded by the shim's interposer with GPU times; writing them here too would
  // count each collective twice.
  const bool write_op = !(backend == "nccl" && state().nccl_left_to_shim.load());
  // The flight recorder's view of the collective this rank now waits in (the op itself is
  // written once done); only where this library also reports its completion.
  if (write_op && moescope_comm_op_enter) moescope_comm_op_enter(&info);
  torch::ParamCommsDebugInfo description(
      std::make_tuple(group->getGroupName(), group->getGroupDesc()), group->getRank(),
      std::string(display_name), static_cast<int64_t>(sent.elements),
      static_cast<int64_t>(received.elements), like.defined() ? like.scalar_type() : at::kByte,
      input_splits, output_splits, /*globalRankStart=*/0, /*globalRankStride=*/0, group->getSize());
  return std::make_shared<PendingCollective>(std::move(description), info, std::move(split_bytes),
                                             write_op);
}

// The kernel of every c10d collective at ADInplaceOrView: describe, then run it unchanged.
void capture_collective(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        torch::jit::Stack* stack) {
  std::shared_ptr<PendingCollective> pending;
  const uint64_t enqueue_begin = moescope_recording ? moescope_now_ns() : 0;
  if (moescope_recording) {
    try {
      pending = describe_collective(op, *stack, enqueue_begin);
    } catch (const std::exception& error) {
      // Never in the program's way: run the collective unrecorded, say so once.
      if (!state().warned_unreadable.exchange(true)) {
        std::fprintf(stderr, "moescope: torch capture cannot read %s (%s); not recorded\n",
                     op.schema().name().c_str(), error.what());
      }
      pending.reset();
    }
  }
  if (!pending) {
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
    return;
  }
  {
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PARAM_COMMS_INFO, pending);
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  moescope_span_complete(c10d_domain(), pending->op_name_id(), enqueue_begin, moescope_now_ns());
}

// A backend's execution range (user scope, e.g. "gloo:all_reduce") running under a collective.
struct ExecutionRange : at::ObserverContext {
  const PendingCollective* pending = nullptr;
  uint64_t start_ns = 0;
  uint64_t thread = 0;
};

std::unique_ptr<at::ObserverContext> on_execution_start(const at::RecordFunction&) {
  if (!moescope_recording) return nullptr;
  PendingCollective* pending = current_pending_collective();
  if (!pending) return nullptr;
  auto range = std::make_unique<ExecutionRange>();
  range->pending = pending;
  range->start_ns = moescope_now_ns();
  range->thread = at::RecordFunction::currentThreadId();
  pending->note_execution_start(range->start_ns);
  return range;
}

void on_execution_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  auto* range = static_cast<ExecutionRange*>(context);
  if (!range) return;
  const uint64_t end = moescope_now_ns();
  // The ending thread runs under the collective's propagated state too; compare rather than
  // trust the stored pointer, which is only known valid while that state holds it.
  PendingCollective* pending = current_pending_collective();
  if (pending && pending == range->pending) pending->note_execution_end(end);
  if (range->thread == at::RecordFunction::currentThreadId() && moescope_recording) {
    moescope_span_complete(c10d_domain(), moescope_intern(fn.name()), range->start_ns, end);
  }
}

}  // namespace

bool start_collective_capture(bool nccl_left_to_shim, std::string* reason) {
  CaptureState& capture = state();
  capture.nccl_left_to_shim.store(nccl_left_to_shim);
  if (capture.kernels) return true;
  try {
    auto kernels = std::make_unique<torch::Library>(
        torch::Library::IMPL, "c10d", c10::DispatchKey::ADInplaceOrView, __FILE__, __LINE__);
    size_t registered = 0;
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      constexpr std::string_view kNamespace = "c10d::";
      if (std::string_view(name.name).substr(0, kNamespace.size()) != kNamespace) continue;
      auto handle = c10::Dispatcher::singleton().findSchema(name);
      if (!handle) continue;
      bool has_group = false;
      for (const c10::Argument& argument : handle->schema().arguments()) {
        has_group |= argument.name() == "process_group";
      }
      // An operator that already has a kernel here keeps it (ours would replace it).
      if (!has_group || handle->hasKernelForDispatchKey(c10::DispatchKey::ADInplaceOrView)) {
        continue;
      }
      std::string qualified = name.name.substr(kNamespace.size());
      if (!name.overload_name.empty()) qualified += "." + name.overload_name;
      kernels->impl(qualified.c_str(),
                    torch::CppFunction::makeFromBoxedFunction<&capture_collective>());
      ++registered;
    }
    if (registered == 0) {
      *reason = "no c10d collective operators registered (torch.distributed unavailable?)";
      return false;
    }
    capture.execution_callback =
        at::addGlobalCallback(at::RecordFunctionCallback(&on_execution_start, &on_execution_end)
                                  .needsInputs(false)
                                  .scopes({at::RecordScope::USER_SCOPE}));
    capture.kernels = std::move(kernels);
    return true;
  } catch (const std::exception& error) {
    *reason = std::string("cannot hook the c10d operators: ") + error.what();
    return false;
  }
}

void stop_collective_capture() {
  CaptureState& capture = state();
  remove_record_function_callback(capture.execution_callback);
  capture.kernels.reset();  // deregisters the kernels
}

}  // namespace moescope::torch_capture
