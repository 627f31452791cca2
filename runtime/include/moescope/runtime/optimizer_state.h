// The per-parameter state tensors of LibTorch's optimizers, for code that measures them
// (memory accounting) or moves them with their parameter (expert migration).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace moescope::runtime {

/// The defined state tensors of one parameter's state: Adam/AdamW exp_avg, exp_avg_sq,
/// max_exp_avg_sq; SGD momentum_buffer; Adagrad sum; RMSprop square_avg, momentum_buffer,
/// grad_avg. Each has the parameter's shape. Throws c10::Error naming the state type otherwise.
std::vector<at::Tensor> optimizer_state_tensors(const torch::optim::OptimizerParamState& state);

/// The state tensors `optimizer` holds for `param`; empty before the optimizer's first step.
std::vector<at::Tensor> optimizer_state_tensors(const torch::optim::Optimizer& optimizer,
                                                const at::Tensor& param);

}  // namespace moescope::runtime
