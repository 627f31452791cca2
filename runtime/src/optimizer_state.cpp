#include "moescope/runtime/optimizer_state.h"

#include <c10/util/Exception.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <initializer_list>
#include <typeinfo>

namespace moescope::runtime {
namespace {

std::vector<at::Tensor> defined(std::initializer_list<at::Tensor> tensors) {
  std::vector<at::Tensor> result;
  for (const at::Tensor& tensor : tensors) {
    if (tensor.defined()) result.push_back(tensor);
  }
  return result;
}

}  // namespace

std::vector<at::Tensor> optimizer_state_tensors(const torch::optim::OptimizerParamState& state) {
  using namespace torch::optim;
  if (const auto* adam = dynamic_cast<const AdamParamState*>(&state)) {
    return defined({adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()});
  }
  if (const auto* adamw = dynamic_cast<const AdamWParamState*>(&state)) {
    return defined({adamw->exp_avg(), adamw->exp_avg_sq(), adamw->max_exp_avg_sq()});
  }
  if (const auto* sgd = dynamic_cast<const SGDParamState*>(&state)) {
    return defined({sgd->momentum_buffer()});
  }
  if (const auto* adagrad = dynamic_cast<const AdagradParamState*>(&state)) {
    return defined({adagrad->sum()});
  }
  if (const auto* rmsprop = dynamic_cast<const RMSpropParamState*>(&state)) {
    return defined({rmsprop->square_avg(), rmsprop->momentum_buffer(), rmsprop->grad_avg()});
  }
  TORCH_CHECK(false, "cannot read optimizer state of type ", typeid(state).name(),
              " (supported: Adam, AdamW, SGD, Adagrad, RMSprop)");
  return {};
}

std::vector<at::Tensor> optimizer_state_tensors(const torch::optim::Optimizer& optimizer,
                                                const at::Tensor& param) {
  const auto& states = optimizer.state();
  const auto found = states.find(param.unsafeGetTensorImpl());
  if (found == states.end()) return {};
  return optimizer_state_tensors(*found->second);
}

}  // namespace moescope::runtime
