#include "overview_panel.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include <imgui.h>

#include "moescope/viewer/heatmap_layout.h"
#include "panel_drawing.h"

namespace moescope::viewer {
namespace {

constexpr float kLabelWidth = 150.0f;
constexpr float kLegendWidth = 90.0f;
constexpr float kStepAxisHeight = 18.0f;
constexpr float kMinRowHeight = 3.0f, kMaxRowHeight = 14.0f;
constexpr float kMaxColumnWidth = 24.0f;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename T>
bool ready(const std::future<T>& future) {
  return future.valid() && future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// A vertical colour bar from heat_colour(0) (bottom) to heat_colour(1) (top), labelled at both
// ends.
void draw_legend(ImDrawList* draw, ImVec2 top_left, ImVec2 size, const char* top_label,
                 const char* bottom_label) {
  const int bands = 48;
  for (int i = 0; i < bands; ++i) {
    const float y0 = top_left.y + size.y * float(i) / bands;
    const float y1 = top_left.y + size.y * float(i + 1) / bands;
    draw->AddRectFilled(ImVec2(top_left.x, y0), ImVec2(top_left.x + size.x, y1 + 0.5f),
                        packed_rgba(heat_colour(1.0 - (i + 0.5) / bands)));
  }
  draw->AddText(ImVec2(top_left.x + size.x + 4, top_left.y - 2), IM_COL32(220, 220, 220, 255),
                top_label);
  draw->AddText(ImVec2(top_left.x + size.x + 4, top_left.y + size.y - 12),
                IM_COL32(220, 220, 220, 255), bottom_label);
}

// Steps [first, last) of shown column `column` when `steps` steps share `columns` columns.
void column_steps(size_t column, size_t columns, size_t steps, size_t& first, size_t& last) {
  first = column * steps / columns;
  last = std::max(first + 1, (column + 1) * steps / columns);
}

}  // namespace

void OverviewPanel::open(std::vector<std::string> summaries) {
  summaries_ = summaries;
  loaded_ = false;
  overview_ = JobOverview{};
  load_started_ = now_seconds();
  overview_loading_ = std::async(
      std::launch::async, [files = std::move(summaries)] { return load_job_overview(files); });
}

void OverviewPanel::poll() {
  if (ready(overview_loading_)) {
    overview_ = overview_loading_.get();
    load_seconds_ = now_seconds() - load_started_;
    rows_ = order_overview_rows(overview_, order_);
    loaded_ = true;
  }
  if (ready(detail_loading_)) {
    detail_ = detail_loading_.get();
    detail_request_ = pending_;
    if (detail_->model.processes.empty()) {
      detail_message_ =
          "rank " + std::to_string(pending_.rank) + ": nothing readable in " + pending_.trace +
          (detail_->model.errors.empty() ? std::string()
                                         : " (" + detail_->model.errors.front().to_string() + ")");
      detail_.reset();
    } else {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "detail: rank %d, steps %" PRId64 "-%" PRId64 " (%" PRIu64
                    " events read, cap %" PRIu64 ") in the other tabs",
                    pending_.rank, pending_.first_step, pending_.last_step,
                    detail_->model.total_events, kDetailMaxEvents);
      detail_message_ = text;
    }
  }
}

std::unique_ptr<LoadedTrace> OverviewPanel::take_detail(DetailRequest& request) {
  if (!detail_) return nullptr;
  request = detail_request_;
  return std::move(detail_);
}

void OverviewPanel::request_detail(size_t row, size_t column) {
  if (detail_loading_.valid()) return;  // one at a time
  DetailRequest request = detail_request_for(overview_, row, column);
  if (!request.error.empty()) {
    detail_message_ = request.error;
    return;
  }
  pending_ = request;
  detail_message_ = "loading rank " + std::to_string(request.rank) + ", steps " +
                    std::to_string(request.first_step) + "-" + std::to_string(request.last_step) +
                    " from " + request.trace;
  detail_loading_ = std::async(std::launch::async, [request] { return load_rank_detail(request); });
}

bool OverviewPanel::click(int32_t rank, int64_t step) {
  const int row = overview_.row_of_rank(rank);
  auto at = std::find(overview_.steps.begin(), overview_.steps.end(), step);
  if (row < 0 || at == overview_.steps.end()) return false;
  request_detail(size_t(row), size_t(at - overview_.steps.begin()));
  return detail_loading_.valid();
}

void OverviewPanel::draw_controls() {
  ImGui::Text(
      "Job overview: %zu rank(s) on %zu host(s), %zu step(s), from %zu summaries "
      "(read in %.2f s)",
      overview_.rows.size(), rows_.groups.size(), overview_.steps.size(), overview_.summaries,
      load_seconds_);
  if (overview_.headlines.empty()) {
    ImGui::TextDisabled("No rank slowed down from a step on, and no host is slow.");
  }
  for (const std::string& line : overview_.headlines) {
    ImGui::TextColored(ImVec4(1.0f, 0.72f, 0.3f, 1.0f), "%s", line.c_str());
  }
  for (const std::string& note : overview_.notes) ImGui::TextDisabled("note: %s", note.c_str());
  int metric = static_cast<int>(metric_);
  ImGui::RadioButton("busy time (against the step's median rank)", &metric,
                     static_cast<int>(OverviewMetric::kBusy));
  ImGui::SameLine();
  ImGui::RadioButton("time others waited for the rank", &metric,
                     static_cast<int>(OverviewMetric::kWaitedFor));
  metric_ = static_cast<OverviewMetric>(metric);
  ImGui::SameLine(0, 30);
  const char* orders[] = {"rank", "slowest mean", "onset"};
  int order = static_cast<int>(order_);
  ImGui::SetNextItemWidth(140.0f);
  if (ImGui::Combo("sort (rows grouped by host)", &order, orders, 3)) {
    order_ = static_cast<OverviewOrder>(order);
    rows_ = order_overview_rows(overview_, order_);
  }
  if (!detail_message_.empty()) ImGui::TextDisabled("%s", detail_message_.c_str());
}

void OverviewPanel::draw_heatmap() {
  const size_t num_rows = rows_.rows.size(), num_steps = overview_.steps.size();
  if (num_rows == 0 || num_steps == 0) return;
  ImVec2 available = ImGui::GetContentRegionAvail();
  const float rows_height = available.y - kStepAxisHeight - 2.0f * ImGui::GetStyle().ItemSpacing.y;
  const float row_height = std::clamp(rows_height / float(num_rows), kMinRowHeight, kMaxRowHeight);
  const float cells_width = std::max(available.x - kLabelWidth - kLegendWidth, 50.0f);
  // More steps than pixels: a column shows the hottest of its steps.
  const size_t columns = std::min(num_steps, std::max<size_t>(1, size_t(std::floor(cells_width))));
  const float column_width = std::min(cells_width / float(columns), kMaxColumnWidth);
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  // The step axis: a few step numbers.
  const size_t label_every = std::max<size_t>(1, size_t(std::ceil(60.0f / column_width)));
  for (size_t c = 0; c < columns; c += label_every) {
    size_t first = 0, last = 0;
    column_steps(c, columns, num_steps, first, last);
    char label[32];
    std::snprintf(label, sizeof(label), "%" PRId64, overview_.steps[first]);
    draw->AddText(ImVec2(origin.x + kLabelWidth + column_width * float(c), origin.y),
                  IM_COL32(200, 200, 200, 255), label);
  }
  draw->AddText(ImVec2(origin.x, origin.y), IM_COL32(200, 200, 200, 255), "host / rank   step:");
  ImGui::Dummy(ImVec2(available.x, kStepAxisHeight));

  ImGui::BeginChild("overview_rows", ImVec2(0, 0), false, ImGuiWindowFlags_NoNavInputs);
  const ImVec2 top = ImGui::GetCursorScreenPos();
  const float scroll = ImGui::GetScrollY();
  const float visible_height = ImGui::GetWindowHeight();
  ImDrawList* rows_draw = ImGui::GetWindowDrawList();
  const size_t first_row = size_t(std::max(0.0f, scroll / row_height));
  const size_t last_row = std::min(num_rows, first_row + size_t(visible_height / row_height) + 2);
  GridLayout grid;
  grid.left = top.x + kLabelWidth;
  grid.top = top.y;
  grid.cell_width = column_width;
  grid.cell_height = row_height;
  grid.rows = int(num_rows);
  grid.columns = int(columns);
  for (size_t r = first_row; r < last_row; ++r) {
    const size_t row = rows_.rows[r];
    const float y = grid.cell_y(int(r));
    for (size_t c = 0; c < columns; ++c) {
      size_t first = 0, last = 0;
      column_steps(c, columns, num_steps, first, last);
      double heat = 0;
      for (size_t s = first; s < last; ++s) heat = std::max(heat, overview_.heat(metric_, row, s));
      rows_draw->AddRectFilled(ImVec2(grid.cell_x(int(c)), y),
                               ImVec2(grid.cell_x(int(c)) + column_width, y + row_height),
                               packed_rgba(heat_colour(heat)));
    }
    if (row_height >= 10.0f) {
      char label[24];
      std::snprintf(label, sizeof(label), "%d", overview_.rows[row].rank);
      rows_draw->AddText(ImVec2(top.x + kLabelWidth - 48.0f, y - 1.0f),
                         IM_COL32(200, 200, 200, 255), label);
    }
  }
  // Host groups: a line above each (across the cells only where rows are tall enough to keep
  // their colour visible) and its name at its first row.
  const float line_end = row_height >= 6.0f ? grid.cell_x(int(columns)) : grid.left;
  for (const HostGroup& group : rows_.groups) {
    if (group.first + group.count < first_row || group.first > last_row) continue;
    const float y = grid.cell_y(int(group.first));
    rows_draw->AddLine(ImVec2(top.x, y), ImVec2(line_end, y), IM_COL32(120, 120, 130, 255));
    if (row_height * float(group.count) >= 12.0f) {
      rows_draw->AddText(ImVec2(top.x + 2.0f, y), IM_COL32(170, 200, 255, 255), group.host.c_str());
    }
  }
  ImGui::Dummy(ImVec2(kLabelWidth + column_width * float(columns), row_height * float(num_rows)));
  int row = 0, column = 0;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  if (ImGui::IsWindowHovered() && grid.cell_at(mouse.x, mouse.y, row, column)) {
    size_t first = 0, last = 0;
    column_steps(size_t(column), columns, num_steps, first, last);
    const size_t index = rows_.rows[size_t(row)];
    const OverviewRow& rank = overview_.rows[index];
    ImGui::BeginTooltip();
    ImGui::Text("rank %d on %s, step %" PRId64, rank.rank, rank.host.c_str(),
                overview_.steps[first]);
    ImGui::Text("busy %.2f ms (the step's median rank: %.2f ms), others waited %.2f ms",
                overview_.value(OverviewMetric::kBusy, index, first),
                overview_.step_median_busy_ms[first],
                overview_.value(OverviewMetric::kWaitedFor, index, first));
    if (rank.onset_step >= 0) {
      ImGui::Text("slower by %.0f%% from step %" PRId64, 100.0 * rank.slowdown, rank.onset_step);
    }
    ImGui::TextDisabled(rank.trace.empty() ? "no trace beside the summary"
                                           : "click: load this rank's steps around it");
    ImGui::EndTooltip();
    if (ImGui::IsMouseClicked(0)) request_detail(index, first);
  }
  ImGui::EndChild();
  // The scale: busy time against the step's median rank, or waited-for milliseconds.
  char top_label[48], bottom_label[48];
  if (metric_ == OverviewMetric::kBusy) {
    std::snprintf(top_label, sizeof(top_label), "%+.0f%%", 100.0 * (overview_.max_busy_ratio - 1));
    std::snprintf(bottom_label, sizeof(bottom_label), "%+.0f%%",
                  100.0 * (overview_.min_busy_ratio - 1));
  } else {
    std::snprintf(top_label, sizeof(top_label), "%.2f ms", overview_.max_waited_for_ms);
    std::snprintf(bottom_label, sizeof(bottom_label), "0 ms waited");
  }
  draw_legend(draw, ImVec2(grid.cell_x(int(columns)) + 12.0f, top.y),
              ImVec2(14.0f, std::clamp(available.y - kStepAxisHeight - 10.0f, 40.0f, 200.0f)),
              top_label, bottom_label);

  LayoutProbe& probe = layout_probe();
  probe.overview_heatmap = grid;
  probe.overview_ranks.clear();
  for (size_t index : rows_.rows) probe.overview_ranks.push_back(overview_.rows[index].rank);
  probe.overview_column_steps.clear();
  for (size_t c = 0; c < columns; ++c) {
    size_t first = 0, last = 0;
    column_steps(c, columns, num_steps, first, last);
    probe.overview_column_steps.push_back(overview_.steps[first]);
  }
  probe.overview_headlines = overview_.headlines;
  probe.overview_hosts.clear();
  for (const HostGroup& group : rows_.groups) probe.overview_hosts.push_back(group.host);
}

void OverviewPanel::draw() {
  if (!loaded_) {
    ImGui::Text("Reading %zu rank summaries...", summaries_.size());
    return;
  }
  if (!overview_.error.empty()) {
    ImGui::TextColored(ImVec4(1, 0.45f, 0.4f, 1), "%s", overview_.error.c_str());
    return;
  }
  draw_controls();
  draw_heatmap();
}

}  // namespace moescope::viewer
