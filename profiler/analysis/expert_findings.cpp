// The rules about routing and numerics: expert imbalance (with a test against uniform
// routing), token dropping, dead experts, router collapse and non-finite values
// (docs/analysis.md).
#include <algorithm>
#include <cmath>
#include <string>

#include "finding_rules.h"
#include "printf_string.h"

namespace moescope::analysis {
namespace {

// Upper regularized incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a): a series below a + 1,
// Lentz's continued fraction above (Numerical Recipes' split; relative error ~1e-12).
double upper_regularized_gamma(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::fabs(term) > std::fabs(sum) * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefactor));
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::min(1.0, std::exp(log_prefactor) * h);
}

// Pearson's chi-square test of "every expert is equally likely" on a layer's token counts
// summed over the run (docs/analysis.md): the statistic, its p-value with num_experts - 1
// degrees of freedom, and whether the test is valid (at least kMinExpectedPerExpert expected
// tokens per expert; fewer tokens never make evidence).
struct UniformTest {
  double chi_square = 0, p_value = 1;
  bool valid = false;
};
constexpr double kMinExpectedPerExpert = 5.0;

UniformTest test_against_uniform(const std::vector<double>& tokens) {
  UniformTest test;
  double total = 0;
  for (double count : tokens) total += count;
  if (tokens.size() < 2 || total <= 0) return test;
  const double expected = total / double(tokens.size());
  test.valid = expected >= kMinExpectedPerExpert;
  for (double count : tokens) test.chi_square += (count - expected) * (count - expected) / expected;
  test.p_value = upper_regularized_gamma(0.5 * double(tokens.size() - 1), 0.5 * test.chi_square);
  return test;
}

}  // namespace

void FindingRules::expert_imbalance() {
  if (experts_.layers.empty()) return;
  double expert_ms = 0;
  for (size_t p = 0; p < model_.processes.size(); ++p) {
    expert_ms += expert_ms_ && p < expert_ms_->size()
                     ? (*expert_ms_)[p]
                     : expert_ms_per_step(model_, model_.processes[p]);
  }
  expert_ms /= double(std::max<size_t>(1, model_.processes.size()));
  const double per_layer_ms = expert_ms / double(experts_.layers.size());
  const ExpertLoadMatrix totals = expert_load_matrix(model_);
  for (const LayerLoad& layer : experts_.layers) {
    if (layer.max_over_mean < limits_.imbalance_max_over_mean) continue;
    // Evidence first: a few tokens make a large max/mean by chance.
    const int row = totals.row_of(layer.layer);
    if (row < 0) continue;
    const auto first = totals.tokens.begin() + std::ptrdiff_t(row) * totals.num_experts;
    const UniformTest uniform =
        test_against_uniform(std::vector<double>(first, first + layer.num_experts));
    if (!uniform.valid || uniform.p_value >= limits_.imbalance_significance) continue;
    double est = per_layer_ms * (1.0 - 1.0 / layer.max_over_mean);
    Finding& finding = add_for_layer("expert_imbalance", layer, layer.hot_experts, est);
    std::string hot;
    for (uint32_t e : layer.hot_experts) {
      hot += printf_string("%s%u (%.0f%%)", hot.empty() ? "" : ", ", e, 100.0 * layer.share[e]);
    }
    finding.evidence = printf_string(
        "layer %u: max/mean tokens per expert %.2f (CV %.2f, utilization %.0f%%) over %u "
        "steps; hot experts: %s; ideal share %.1f%%; uniform routing rejected (chi-square "
        "%.1f on %u df, p %.2g < %.2g, %.0f tokens)",
        layer.layer, layer.max_over_mean, layer.cv, 100.0 * layer.utilization, layer.num_steps,
        hot.empty() ? "none" : hot.c_str(), 100.0 / layer.num_experts, uniform.chi_square,
        layer.num_experts - 1, uniform.p_value, limits_.imbalance_significance,
        totals.layer_total(row));
    finding.metrics = {
        {"max_over_mean", layer.max_over_mean}, {"cv", layer.cv},
        {"utilization", layer.utilization},     {"expert_ms_per_layer_step", per_layer_ms},
        {"chi_square", uniform.chi_square},     {"p_value", uniform.p_value}};
    finding.suggestion =
        "Rebalance: replicate or move the hot experts (moescope plan), raise the aux-loss "
        "coefficient or enable aux-loss-free bias updates; check the router's initialisation.";
  }
}

void FindingRules::token_dropping() {
  for (const LayerLoad& layer : experts_.layers) {
    if (layer.dropped_fraction < limits_.dropped_fraction) continue;
    Finding& finding = add_for_layer("token_dropping", layer, layer.hot_experts, 0.0,
                                     layer.dropped_fraction >= limits_.dropped_critical_fraction);
    finding.evidence = printf_string(
        "layer %u drops %.1f%% of routed tokens (%llu of %llu)", layer.layer,
        100.0 * layer.dropped_fraction, static_cast<unsigned long long>(layer.dropped_tokens),
        static_cast<unsigned long long>(layer.dropped_tokens + layer.total_tokens));
    finding.metrics = {{"dropped_fraction", layer.dropped_fraction},
                       {"dropped_tokens", double(layer.dropped_tokens)}};
    finding.suggestion =
        "Raise the capacity factor or fix the imbalance that overflows the hot experts; "
        "dropped tokens skip the MoE layer and hurt quality.";
  }
}

void FindingRules::dead_experts() {
  for (const LayerLoad& layer : experts_.layers) {
    if (layer.dead_experts.empty() || layer.num_experts < 2) continue;
    // Evidence: under uniform routing, the chance that some expert gets none of the layer's
    // tokens (union bound E (1 - 1/E)^N) must be below the significance level; a few tokens
    // leave experts empty by chance (docs/analysis.md).
    const double experts = double(layer.num_experts);
    const double chance = experts * std::pow(1.0 - 1.0 / experts, double(layer.total_tokens));
    if (chance >= limits_.imbalance_significance) continue;
    Finding& finding = add_for_layer("dead_experts", layer, layer.dead_experts, 0.0);
    finding.evidence =
        printf_string("layer %u: %zu of %u experts received no token in %u steps", layer.layer,
                      layer.dead_experts.size(), layer.num_experts, layer.num_steps);
    finding.metrics = {{"dead_experts", double(layer.dead_experts.size())},
                       {"num_experts", double(layer.num_experts)}};
    finding.suggestion =
        "Dead experts waste memory and capacity: add load-balancing loss or bias updates, "
        "re-initialise them from a live expert, or check the router for a masking bug.";
  }
}

void FindingRules::router_collapse() {
  for (const LayerLoad& layer : experts_.layers) {
    if (layer.num_experts < 4 || layer.num_steps < 2) continue;
    bool by_load =
        layer.effective_experts_last <= limits_.collapse_effective_share * layer.num_experts &&
        layer.effective_experts_last < 0.75 * layer.effective_experts_first;
    bool by_entropy =
        std::isfinite(layer.router_entropy_first) && std::isfinite(layer.router_entropy_last) &&
        layer.router_entropy_first > 0 &&
        layer.router_entropy_last < limits_.collapse_entropy_ratio * layer.router_entropy_first;
    if (!by_load && !by_entropy) continue;
    Finding& finding = add_for_layer("router_collapse", layer, layer.hot_experts, 0.0, true);
    finding.evidence = printf_string(
        "layer %u: effective experts (exp of the load entropy) fell from %.1f to %.1f of %u; "
        "router entropy %.3f -> %.3f nats",
        layer.layer, layer.effective_experts_first, layer.effective_experts_last, layer.num_experts,
        layer.router_entropy_first, layer.router_entropy_last);
    finding.metrics = {{"effective_experts_first", layer.effective_experts_first},
                       {"effective_experts_last", layer.effective_experts_last}};
    finding.suggestion =
        "The router is concentrating on a few experts: increase the balancing loss, add "
        "z-loss, lower the learning rate of the router, or use aux-loss-free bias balancing.";
  }
}

void FindingRules::nan_inf() {
  const LayerStatsSample* first = nullptr;
  uint64_t bad_samples = 0;
  for (const LayerStatsSample& stats : model_.layer_stats) {
    if (stats.nonfinite_logits == 0 && stats.nonfinite_outputs == 0) continue;
    ++bad_samples;
    if (!first || stats.step < first->step ||
        (stats.step == first->step && stats.time < first->time)) {
      first = &stats;
    }
  }
  if (!first) return;
  Finding& finding = add("nan_inf", 0.0, true);
  finding.where.ranks = {first->rank};
  finding.where.layer = int32_t(first->layer);
  finding.where.first_step = first->step;
  finding.where.last_step = first->step;
  finding.process = int32_t(first->process);
  finding.start = finding.end = first->time;
  finding.evidence = printf_string(
      "first non-finite values at step %lld, layer %u, rank %d (%u logits, %u outputs); %llu "
      "layer samples affected in all",
      static_cast<long long>(first->step), first->layer, first->rank, first->nonfinite_logits,
      first->nonfinite_outputs, static_cast<unsigned long long>(bad_samples));
  finding.metrics = {{"step", double(first->step)},
                     {"layer", double(first->layer)},
                     {"rank", double(first->rank)},
                     {"samples", double(bad_samples)}};
  finding.suggestion =
      "Check that layer's inputs at that step: router logits overflowing (add z-loss, compute "
      "the router in fp32), a learning-rate spike, or an expert receiving no tokens.";
}

}  // namespace moescope::analysis
