// The viewer application: a GLFW window with Dear ImGui, the panels in tabs, background loading
// with a progress bar, drag-and-drop and a file browser; and the headless screenshot mode that
// renders real frames through the same code into an offscreen framebuffer and writes a PNG.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compare_panel.h"
#include "file_browser.h"
#include "moe_panels.h"
#include "moescope/viewer/loaded_trace.h"
#include "overview_panel.h"
#include "scripted_input.h"
#include "timeline_panel.h"
#include "viewer_state.h"

struct GLFWwindow;

namespace moescope::viewer {

struct ViewerOptions {
  std::vector<std::string> files;
  std::vector<std::string> against;   // a second run to compare with (the Compare tab)
  std::vector<std::string> overview;  // rank summaries: the job overview (job_overview.h)
  std::string screenshot_path;        // non-empty: render, write the PNG and exit
  Panel panel = Panel::kTimeline;
  int width = 1600, height = 900;
  int finding = 0;     // screenshot mode: act as if report row N (1-based) was clicked
  std::string search;  // screenshot mode: act as if this was searched (first match selected)
  std::string input;   // screenshot mode: scripted mouse/keys (see scripted_input.h)
};

class ViewerApp {
 public:
  explicit ViewerApp(ViewerOptions options);
  ~ViewerApp();
  // Runs until the window closes (or the screenshot is written). Returns the exit code.
  int run();

  // Called by GLFW's drop callback.
  void on_files_dropped(std::vector<std::string> files);

 private:
  bool create_window();
  void start_loading(std::vector<std::string> files);
  void frame();
  void draw_menu_and_toolbar();
  void draw_loading_overlay();
  void draw_panels();
  // Takes the second run once loaded and compares it with the first once both are whole.
  void update_comparison();
  // A rank's detail loaded from the overview replaces the trace on screen, fitted to its window.
  void show_rank_detail(std::unique_ptr<LoadedTrace> detail, const DetailRequest& request);
  bool write_screenshot();

  ViewerOptions options_;
  GLFWwindow* window_ = nullptr;
  std::unique_ptr<LoadedTrace> trace_;
  std::unique_ptr<TraceLoadingJob> loading_;
  std::unique_ptr<TraceTablesJob> tables_;  // declared after trace_: destroyed first
  std::string load_error_;
  ViewerState state_;
  Panel current_panel_ = Panel::kTimeline;
  TimelinePanel timeline_;
  ExpertsPanel experts_;
  CommPanel comm_;
  MemoryPanel memory_;
  ReportPanel report_;
  StatsPanel stats_;
  OverviewPanel overview_;
  // The run given with --against and its comparison with trace_ (null until both are loaded).
  std::unique_ptr<TraceLoadingJob> against_loading_;
  std::unique_ptr<LoadedTrace> against_;
  std::unique_ptr<RunComparison> comparison_;
  const LoadedTrace* compared_trace_ = nullptr;  // the trace_ comparison_ was made with
  ComparePanel compare_;
  FileBrowser browser_;
  ScriptedInput scripted_input_;
  bool playing_script_ = false;
  // Offscreen target of screenshot mode.
  unsigned framebuffer_ = 0, colour_texture_ = 0;
};

}  // namespace moescope::viewer
