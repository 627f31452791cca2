// --torch-ops: every operator as a span named with its input shapes (see capture_parts.h).
//
// A global RecordFunction callback over operators (FUNCTION), autograd nodes
// (BACKWARD_FUNCTION) and user scopes (torch.profiler.record_function, "Optimizer.step#...").
// It asks for inputs, so torch boxes every operator's arguments: this mode costs a real share of
// a small model's step (docs/performance.md, "PyTorch capture (CPU)") and is off by default.
#include <ATen/record_function.h>

#include <memory>

#include "capture_parts.h"
#include "operator_span_names.h"
#include "record_function_callback.h"
#include "recorder_binding.h"

namespace moescope::torch_capture {
namespace {

// Distinct "operator + shapes" names one process may add to its trace.
constexpr size_t kMaxOperatorSpanNames = 8192;

struct OperatorCaptureState {
  at::CallbackHandle callback = 0;
  CappedNameInterner names{kMaxOperatorSpanNames, &moescope_intern_n};
  moescope_name_t domain = 0;
};

// Leaked on purpose (no static destructor racing torch's own at exit).
OperatorCaptureState& state() {
  static OperatorCaptureState* const instance = new OperatorCaptureState();
  return *instance;
}

struct OperatorRange : at::ObserverContext {
  moescope_name_t name = 0;
  uint64_t start_ns = 0;
  uint64_t thread = 0;
};

void add_input(OperatorSpanName& name, const c10::IValue& input) {
  if (input.isTensor()) {
    const at::Tensor& tensor = input.toTensor();
    if (!tensor.defined() || tensor.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
      name.add_other();
      return;
    }
    c10::IntArrayRef sizes = tensor.sizes();
    name.add_tensor(sizes.data(), sizes.size());
  } else if (input.isTensorList()) {
    name.begin_tensor_list();
    for (const at::Tensor& tensor : input.toTensorVector()) {
      if (tensor.defined() && !tensor.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
        name.add_tensor(tensor.sizes().data(), tensor.sizes().size());
      } else {
        name.add_other();
      }
    }
    name.end_tensor_list();
  } else {
    name.add_other();
  }
}

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction& fn) {
  if (!moescope_recording) return nullptr;
  OperatorCaptureState& capture = state();
  const char* bare_name = fn.name();
  auto range = std::make_unique<OperatorRange>();
  // User scopes often pass no inputs at all (record_function): their name alone.
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    range->name = capture.names.intern(bare_name, bare_name);
  } else {
    OperatorSpanName name(bare_name);
    for (const c10::IValue& input : fn.inputs()) add_input(name, input);
    range->name = capture.names.intern(name.finish(), bare_name);
  }
  range->thread = at::RecordFunction::currentThreadId();
  range->start_ns = moescope_now_ns();
  return range;
}

void on_operator_end(const at::RecordFunction&, at::ObserverContext* context) {
  auto* range = static_cast<OperatorRange*>(context);
  if (!range || !moescope_recording) return;
  // An async range ending on another thread would sit on the wrong track: dropped.
  if (range->thread != at::RecordFunction::currentThreadId()) return;
  moescope_span_complete(state().domain, range->name, range->start_ns, moescope_now_ns());
}

}  // namespace

bool start_operator_capture(std::string* reason) {
  OperatorCaptureState& capture = state();
  if (capture.callback) return true;
  try {
    capture.domain = moescope_intern("torch");
    capture.callback = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_operator_start, &on_operator_end)
            .needsInputs(true)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                     at::RecordScope::USER_SCOPE}));
    return true;
  } catch (const std::exception& error) {
    *reason = std::string("cannot add the operator callback: ") + error.what();
    return false;
  }
}

void stop_operator_capture() {
  remove_record_function_callback(state().callback);
}

}  // namespace moescope::torch_capture
