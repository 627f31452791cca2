#include "moe_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace moescope::runtime::testing {
namespace {

// Indices of the k largest values, ties broken by the lower index.
std::vector<int64_t> top_indices(const std::vector<double>& values, int64_t k) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

}  // namespace

ReferenceResult dense_reference_forward(MoELayerImpl& layer, const at::Tensor& hidden) {
  const MoEConfig& config = layer.config();
  const int64_t num_experts = config.num_experts;
  const int64_t top_k = config.top_k;
  const at::Tensor x = hidden.reshape({-1, config.hidden_size});
  const int64_t num_tokens = x.size(0);
  const at::ScalarType router_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;

  // ---- router, written out per token
  at::Tensor logits = x.to(router_dtype).mm(layer.router->gate_weight.to(router_dtype).t());
  if (!config.gate_logit_skew.empty()) {
    logits = logits + at::tensor(config.gate_logit_skew, at::kDouble).to(router_dtype);
  }
  const at::Tensor scores =
      config.score_function == ScoreFunction::kSoftmax ? logits.softmax(1) : logits.sigmoid();
  const at::Tensor bias_host = layer.router->expert_bias.to(at::kCPU, at::kDouble).contiguous();
  const auto bias = bias_host.accessor<double, 1>();
  const at::Tensor scores_host = scores.detach().to(at::kCPU, at::kDouble).contiguous();
  const auto score = scores_host.accessor<double, 2>();
  std::vector<int64_t> chosen_experts(static_cast<size_t>(num_tokens * top_k));
  const int64_t per_group = num_experts / config.num_groups;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> selection(static_cast<size_t>(num_experts));
    for (int64_t e = 0; e < num_experts; ++e) {
      selection[e] = score[t][e] + (config.enable_expert_bias ? bias[e] : 0.0);
    }
    if (config.force_uniform_routing) {
      for (int64_t k = 0; k < top_k; ++k)
        chosen_experts[t * top_k + k] = (t * top_k + k) % num_experts;
      continue;
    }
    if (config.num_groups > 1) {
      std::vector<double> group_scores(static_cast<size_t>(config.num_groups));
      for (int64_t g = 0; g < config.num_groups; ++g) {
        std::vector<double> members(selection.begin() + g * per_group,
                                    selection.begin() + (g + 1) * per_group);
        std::sort(members.rbegin(), members.rend());
        group_scores[g] = members[0] + (per_group > 1 ? members[1] : 0.0);
      }
      const std::vector<int64_t> groups = top_indices(group_scores, config.group_top_k);
      for (int64_t e = 0; e < num_experts; ++e) {
        if (std::find(groups.begin(), groups.end(), e / per_group) == groups.end()) {
          selection[e] = -1e300;
        }
      }
    }
    const std::vector<int64_t> chosen = top_indices(selection, top_k);
    for (int64_t k = 0; k < top_k; ++k) chosen_experts[t * top_k + k] = chosen[k];
  }
  at::Tensor indices =
      at::tensor(chosen_experts, at::TensorOptions().dtype(at::kLong)).view({num_tokens, top_k});
  indices = indices.to(x.device());
  at::Tensor weights = scores.gather(1, indices);
  if (config.normalize_top_k_weights) weights = weights / (weights.sum(1, true) + 1e-20);
  weights = weights * config.routed_scaling_factor;

  // ---- capacity, per expert: sort its assignments by priority and keep the first `capacity`
  at::Tensor keep = at::ones({num_tokens, top_k}, at::kBool);
  ReferenceResult result;
  if (config.capacity_factor > 0) {
    const auto capacity =
        static_cast<int64_t>(std::ceil(static_cast<double>(num_tokens * top_k) *
                                       config.capacity_factor / static_cast<double>(num_experts)));
    const at::Tensor weights_host = weights.detach().to(at::kCPU, at::kDouble).contiguous();
    const auto weight = weights_host.accessor<double, 2>();
    auto keep_flag = keep.accessor<bool, 2>();
    for (int64_t e = 0; e < num_experts; ++e) {
      std::vector<std::pair<int64_t, int64_t>> mine;  // (token, slot) in position order
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t k = 0; k < top_k; ++k) {
          if (chosen_experts[t * top_k + k] == e) mine.emplace_back(t, k);
        }
      }
      if (config.drop_policy == DropPolicy::kByProbability) {
        std::stable_sort(
            mine.begin(), mine.end(),
            [&](const std::pair<int64_t, int64_t>& a, const std::pair<int64_t, int64_t>& b) {
              return weight[a.first][a.second] > weight[b.first][b.second];
            });
      }
      for (size_t i = static_cast<size_t>(capacity); i < mine.size(); ++i) {
        keep_flag[mine[i].first][mine[i].second] = false;
        ++result.num_dropped;
      }
    }
  }
  keep = keep.to(x.device());

  // ---- every token through every expert, masked by the routing
  at::Tensor combine =
      at::zeros({num_tokens, num_experts}, x.options())
          .scatter(1, indices, weights.to(x.scalar_type()) * keep.to(x.scalar_type()));
  at::Tensor output = at::zeros_like(x);
  const int64_t ffn = config.ffn_hidden_size;
  for (int64_t e = 0; e < num_experts; ++e) {
    const at::Tensor w_gate_up = layer.experts->w_gate_up[e];
    const at::Tensor w_down = layer.experts->w_down[e];
    const at::Tensor gate = x.mm(w_gate_up.narrow(1, 0, ffn));
    const at::Tensor up = x.mm(w_gate_up.narrow(1, ffn, ffn));
    const at::Tensor expert_out = (gate * gate.sigmoid() * up).mm(w_down);
    output = output + combine.narrow(1, e, 1) * expert_out;
  }
  if (layer.shared_experts) {
    const at::Tensor w_gate_up = layer.shared_experts->w_gate_up[0];
    const at::Tensor w_down = layer.shared_experts->w_down[0];
    const int64_t width = w_down.size(0);
    const at::Tensor gate = x.mm(w_gate_up.narrow(1, 0, width));
    const at::Tensor up = x.mm(w_gate_up.narrow(1, width, width));
    output = output + (gate * gate.sigmoid() * up).mm(w_down);
  }

  // ---- losses from their definitions
  at::Tensor aux = at::zeros({}, x.options());
  if (num_tokens > 0) {
    const at::Tensor probs =
        config.score_function == ScoreFunction::kSoftmax ? scores : scores / scores.sum(1, true);
    const at::Tensor counts =
        at::zeros({num_tokens, num_experts}, scores.options()).scatter(1, indices, 1.0);
    if (config.aux_loss_coeff > 0) {
      const at::Tensor f = counts.sum(0) / static_cast<double>(num_tokens * top_k);
      aux = aux +
            ((f * probs.mean(0)).sum() * config.aux_loss_coeff * num_experts).to(x.scalar_type());
    }
    if (config.seq_aux_loss_coeff > 0) {
      const int64_t seq = hidden.size(1);
      at::Tensor per_sequence = at::zeros({}, scores.options());
      for (int64_t b = 0; b < hidden.size(0); ++b) {
        const at::Tensor f =
            counts.narrow(0, b * seq, seq).sum(0) / static_cast<double>(seq * top_k);
        const at::Tensor p = probs.narrow(0, b * seq, seq).mean(0);
        per_sequence = per_sequence + (f * p).sum();
      }
      aux = aux + (per_sequence / static_cast<double>(hidden.size(0)) * config.seq_aux_loss_coeff *
                   num_experts)
                      .to(x.scalar_type());
    }
    if (config.z_loss_coeff > 0) {
      aux = aux +
            (logits.exp().sum(1).log().square().mean() * config.z_loss_coeff).to(x.scalar_type());
    }
  }
  result.output = output.view(hidden.sizes());
  result.aux_loss = aux;
  result.top_k_indices = indices;
  result.keep_mask = keep;
  return result;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_TRUE(a.defined() && b.defined());
  if (!a.defined() || !b.defined()) return 1e300;
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.numel() == 0) return 0.0;
  return (a.detach().to(at::kDouble) - b.detach().to(at::kDouble)).abs().max().item<double>();
}

void expect_error_mentions(const std::function<void()>& body,
                           const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "expected a c10::Error mentioning '" << needles.front() << "'";
  } catch (const c10::Error& error) {
    const std::string message = error.what_without_backtrace();
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "error message lacks '" << needle << "': " << message;
    }
  }
}

MoEConfig small_config(int64_t hidden, int64_t ffn, int64_t experts, int64_t top_k) {
  MoEConfig config;
  config.hidden_size = hidden;
  config.ffn_hidden_size = ffn;
  config.num_experts = experts;
  config.top_k = top_k;
  config.init_std = 0.3;  // large enough that routing and SwiGLU are far from linear
  return config;
}

}  // namespace moescope::runtime::testing
