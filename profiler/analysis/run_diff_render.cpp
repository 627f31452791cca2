// `moescope diff` output: text, markdown and JSON (what each number means: run_diff.h).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "moescope/analysis/run_diff.h"
#include "text_writer.h"

namespace moescope::analysis {
namespace {

using nlohmann::ordered_json;

std::string printf_text(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

// A value in its unit, `sign` with an explicit + for differences.
std::string value_text(double value, const std::string& unit, bool sign = false) {
  if (!std::isfinite(value)) return "n/a";
  if (unit == "bytes") {
    const double magnitude = std::abs(value);
    const char* pattern = sign ? "%+.2f" : "%.2f";
    if (magnitude >= 1 << 20) return printf_text(pattern, value / double(1 << 20)) + " MiB";
    if (magnitude >= 1 << 10) return printf_text(pattern, value / double(1 << 10)) + " KiB";
    return printf_text(sign ? "%+.0f" : "%.0f", value) + " B";
  }
  if (unit == "ratio") return printf_text(sign ? "%+.3f" : "%.3f", value);
  if (unit == "ms") return printf_text(sign ? "%+.2f" : "%.2f", value);
  return printf_text(sign ? "%+.1f" : "%.1f", value);
}

std::string interval_text(const DiffRow& row) {
  if (!row.interval.known) return "n/a";
  return "[" + value_text(row.interval.low, row.unit, true) + ", " +
         value_text(row.interval.high, row.unit, true) + "]";
}

std::string percent_text(const DiffRow& row) {
  if (row.base.mean == 0) return "";
  return printf_text("%+.1f%%", 100.0 * row.interval.difference / std::abs(row.base.mean));
}

// What a row says in one word.
std::string verdict(const DiffRow& row) {
  if (!row.in_base && !row.in_next) return "";
  if (!row.base.known() && !row.base_series.values.empty() && row.in_next && row.in_base) {
    return "too few steps";
  }
  if (!row.in_base && row.next_series.values.empty()) return "";
  if (row.base_series.values.empty()) return "only in new";
  if (row.next_series.values.empty()) return "only in base";
  if (!row.interval.known) return "too few steps";
  if (!row.interval.significant) return "noise";
  const bool up = row.interval.difference > 0;
  if (row.is_time) return up ? "slower" : "faster";
  return up ? "higher" : "lower";
}

std::string experts_text(const std::vector<uint32_t>& experts) {
  std::string text;
  for (uint32_t e : experts) text += (text.empty() ? "" : ",") + std::to_string(e);
  return text.empty() ? "none" : text;
}

const char* section_title(const std::string& section) {
  if (section == "step") return "Step time and its breakdown (ms per step, mean over ranks)";
  if (section == "phase") return "Phases (ms per step)";
  if (section == "module") return "Module spans (ms per step)";
  if (section == "span") return "Spans (ms per step)";
  if (section == "collective") return "Collectives per kind (per step, on a rank)";
  if (section == "layer") return "MoE layers (per step)";
  if (section == "rank") return "Ranks: busy time over the other ranks' median (ms per step)";
  return "Other";
}

std::vector<std::string> row_cells(const DiffRow& row, bool with_section) {
  std::vector<std::string> cells;
  if (with_section) cells.push_back(row.section);
  const std::string se_sign = "±";
  auto side = [&](const SampleMean& mean, bool present) {
    if (!present) return std::string("-");
    std::string text = value_text(mean.mean, row.unit);
    if (mean.known()) text += " ± " + value_text(mean.standard_error, row.unit);
    return text;
  };
  cells.push_back(row.name);
  cells.push_back(side(row.base, !row.base_series.values.empty()));
  cells.push_back(side(row.next, !row.next_series.values.empty()));
  cells.push_back(value_text(row.interval.difference, row.unit, true));
  cells.push_back(percent_text(row));
  cells.push_back(interval_text(row));
  cells.push_back(verdict(row));
  return cells;
}

std::string side_text(const RunSide& side) {
  return std::to_string(side.ranks) + " rank(s), " + std::to_string(side.steps) + " of " +
         std::to_string(side.steps_total) + " steps (" + side.step_source + ")";
}

void render_prediction(TextWriter& w, const PredictionCheck& check) {
  const PlacementPrediction& p = check.prediction;
  w.heading("Predicted by the plan vs measured in the new run");
  w.line("cost model from the base run: " + describe_expert_cost(p.cost));
  std::vector<std::vector<std::string>> rows;
  double busy_gap = 0;  // mean over ranks of measured - predicted busy time
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    const RankPrediction& rank = p.ranks[i];
    const RankMeasurement& measured = check.measured[i];
    double measured_rows = 0;
    for (double value : measured.rows) measured_rows += value;
    busy_gap += (measured.busy_ms - rank.busy_ms_after) / double(p.ranks.size());
    rows.push_back({std::to_string(rank.rank), value_text(rank.total_rows_before(), "rows"),
                    value_text(rank.total_rows_after(), "rows"), value_text(measured_rows, "rows"),
                    value_text(rank.busy_ms_before, "ms"), value_text(rank.busy_ms_after, "ms"),
                    value_text(measured.busy_ms, "ms"),
                    value_text(measured.busy_ms - rank.busy_ms_after, "ms", true)});
  }
  w.table({"rank", "rows/step before", "predicted", "measured", "busy ms before", "predicted",
           "measured", "measured - predicted"},
          rows);
  w.line("busy time beyond the prediction: " + value_text(busy_gap, "ms", true) +
         " ms per rank and step (busy time counts the expert rows only; the communication, "
         "migration and rebalancing terms below are in the step time)");
  if (!p.terms.empty()) {
    std::vector<std::vector<std::string>> terms;
    for (const StepCostTerm& term : p.terms) {
      terms.push_back(
          {term.name, value_text(term.ms, "ms", true), value_text(term.stderr_ms, "ms")});
    }
    w.table({"predicted term", "ms per step", "standard error"}, terms);
  }
  std::string measured = value_text(check.measured_step_change, "ms", true) + " ms";
  if (check.measured_interval.known) {
    measured += " [" + value_text(check.measured_interval.low, "ms", true) + ", " +
                value_text(check.measured_interval.high, "ms", true) + "]";
  }
  std::string predicted = value_text(p.step_ms_change, "ms", true) + " ms";
  if (p.step_ms_change_stderr > 0) {
    predicted += " [" + value_text(p.change_low(), "ms", true) + ", " +
                 value_text(p.change_high(), "ms", true) + "]";
  }
  w.line("step time change: predicted " + predicted + ", measured " + measured +
         (check.inside_interval ? " (the prediction lies inside the measured interval)"
                                : " (the prediction lies outside the measured interval)"));
}

std::string render_text(const RunDiff& diff, bool markdown) {
  TextWriter w(markdown);
  w.line(markdown ? "# moescope diff" : "moescope diff");
  w.line((markdown ? "\n" : "") + std::string("base: ") + side_text(diff.base));
  w.line("new:  " + side_text(diff.next));
  const double per_row = 100.0 * (1.0 - diff.alpha_per_row);
  w.line(
      printf_text("intervals: new - base, %.0f%% together over ", 100 * diff.options.confidence) +
      std::to_string(diff.rows_compared) + printf_text(" rows (each at %.3f%%), ", per_row) +
      "from batch means of the steps after " + std::to_string(diff.options.skip_steps) +
      " warm-up step(s); inside the interval = noise");
  for (const DiffRow& row : diff.rows) {
    if (row.section == "step" && row.name == "step time") {
      w.line("step time " + value_text(row.base.mean, "ms") + " -> " +
             value_text(row.next.mean, "ms") +
             " ms: " + value_text(row.interval.difference, "ms", true) + " ms " +
             interval_text(row) + " " + percent_text(row) + ", " + verdict(row));
      w.line(row.run_to_run_sd > 0
                 ? "its interval includes a run-to-run standard deviation of " +
                       value_text(row.run_to_run_sd, "ms") + " ms per run (--run-to-run)"
                 : "its interval covers the noise inside each run, not between runs of the same "
                   "program (measure that with moescope noise, pass it as --run-to-run)");
    }
  }

  w.heading("Ranked changes (time per step gained or lost, significant only)");
  if (diff.ranked.empty()) w.line("No time difference larger than the noise.");
  std::vector<std::vector<std::string>> ranked;
  for (size_t index : diff.ranked) ranked.push_back(row_cells(diff.rows[index], true));
  const std::vector<std::string> header{"what", "base",     "new",    "change",
                                        "%",    "interval", "verdict"};
  std::vector<std::string> ranked_header{"section"};
  ranked_header.insert(ranked_header.end(), header.begin(), header.end());
  if (!ranked.empty()) w.table(ranked_header, ranked);
  size_t noise = 0;
  for (const DiffRow& row : diff.rows) noise += row.interval.known && !row.interval.significant;
  w.line(std::to_string(diff.significant()) + " row(s) differ beyond the noise, " +
         std::to_string(noise) + " within it.");

  std::string section;
  std::vector<std::vector<std::string>> rows;
  auto flush = [&] {
    if (!rows.empty()) {
      w.heading(section_title(section));
      w.table(header, rows);
    }
    rows.clear();
  };
  for (const DiffRow& row : diff.rows) {
    if (row.section != section) flush(), section = row.section;
    rows.push_back(row_cells(row, false));
  }
  flush();

  if (!diff.expert_sets.empty()) {
    w.heading("Hot and dead experts (whole run)");
    std::vector<std::vector<std::string>> sets;
    for (const ExpertSetChange& change : diff.expert_sets) {
      sets.push_back({std::to_string(change.layer), change.what, experts_text(change.base),
                      experts_text(change.next)});
    }
    w.table({"layer", "what", "base", "new"}, sets);
  }
  w.heading("Findings");
  std::vector<std::vector<std::string>> findings;
  for (const FindingChange& change : diff.findings) {
    auto side = [](const std::string& severity, double ms) {
      return severity.empty() ? std::string("-") : severity + " " + value_text(ms, "ms") + " ms";
    };
    findings.push_back({change.status, change.kind, change.where,
                        side(change.base_severity, change.base_ms),
                        side(change.next_severity, change.next_ms)});
  }
  if (findings.empty()) {
    w.line("No findings in either run.");
  } else {
    w.table({"status", "kind", "where", "base (est. per step)", "new"}, findings);
  }
  if (diff.prediction) render_prediction(w, *diff.prediction);
  return w.str();
}

ordered_json mean_json(const SampleMean& mean) {
  return {{"mean", mean.mean},
          {"standard_error", mean.standard_error},
          {"steps", mean.steps},
          {"batches", mean.batches}};
}

std::string render_json(const RunDiff& diff) {
  auto side_json = [](const RunSide& side) {
    return ordered_json{{"ranks", side.ranks},       {"steps_compared", side.steps},
                        {"steps", side.steps_total}, {"step_source", side.step_source},
                        {"step_ids", side.step_ids}, {"step_ms", side.step_ms}};
  };
  ordered_json rows = ordered_json::array();
  for (const DiffRow& row : diff.rows) {
    rows.push_back({{"section", row.section},
                    {"name", row.name},
                    {"unit", row.unit},
                    {"is_time", row.is_time},
                    {"in_base", row.in_base},
                    {"in_new", row.in_next},
                    {"base", mean_json(row.base)},
                    {"new", mean_json(row.next)},
                    {"difference", row.interval.difference},
                    {"low", row.interval.low},
                    {"high", row.interval.high},
                    {"degrees_of_freedom", row.interval.degrees_of_freedom},
                    {"known", row.interval.known},
                    {"significant", row.interval.significant},
                    {"verdict", verdict(row)}});
  }
  ordered_json ranked = ordered_json::array();
  for (size_t index : diff.ranked) {
    ranked.push_back({{"section", diff.rows[index].section},
                      {"name", diff.rows[index].name},
                      {"difference_ms", diff.rows[index].interval.difference}});
  }
  ordered_json sets = ordered_json::array();
  for (const ExpertSetChange& change : diff.expert_sets) {
    sets.push_back({{"layer", change.layer},
                    {"what", change.what},
                    {"base", change.base},
                    {"new", change.next}});
  }
  ordered_json findings = ordered_json::array();
  for (const FindingChange& change : diff.findings) {
    findings.push_back({{"kind", change.kind},
                        {"where", change.where},
                        {"status", change.status},
                        {"base_est_ms_per_step", change.base_ms},
                        {"new_est_ms_per_step", change.next_ms},
                        {"base_severity", change.base_severity},
                        {"new_severity", change.next_severity},
                        {"evidence", change.evidence}});
  }
  ordered_json out = {{"base", side_json(diff.base)},
                      {"new", side_json(diff.next)},
                      {"method",
                       {{"confidence", diff.options.confidence},
                        {"rows_compared", diff.rows_compared},
                        {"alpha_per_row", diff.alpha_per_row},
                        {"skip_steps", diff.options.skip_steps},
                        {"max_batches", diff.options.max_batches},
                        {"run_to_run_ms", diff.options.run_to_run_ms}}},
                      {"significant", diff.significant()},
                      {"ranked", ranked},
                      {"rows", rows},
                      {"expert_sets", sets},
                      {"findings", findings}};
  if (diff.prediction) {
    const PredictionCheck& check = *diff.prediction;
    ordered_json measured = ordered_json::array();
    for (const RankMeasurement& rank : check.measured) {
      measured.push_back({{"rank", rank.rank}, {"rows", rank.rows}, {"busy_ms", rank.busy_ms}});
    }
    out["prediction"] = {{"predicted", ordered_json::parse(prediction_to_json(check.prediction))},
                         {"measured_ranks", measured},
                         {"measured_step_ms_change", check.measured_step_change},
                         {"measured_low", check.measured_interval.low},
                         {"measured_high", check.measured_interval.high},
                         {"inside_interval", check.inside_interval}};
  }
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

bool parse_diff_format(const std::string& name, DiffFormat& format) {
  if (name == "text") return format = DiffFormat::kText, true;
  if (name == "markdown") return format = DiffFormat::kMarkdown, true;
  if (name == "json") return format = DiffFormat::kJson, true;
  return false;
}

std::string render_diff(const RunDiff& diff, DiffFormat format) {
  if (format == DiffFormat::kJson) return render_json(diff);
  return render_text(diff, format == DiffFormat::kMarkdown);
}

}  // namespace moescope::analysis
