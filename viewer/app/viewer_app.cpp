#include "viewer_app.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

// GLFW brings <GL/gl.h>; glext.h after it declares the framebuffer-object entry points.
#define GL_GLEXT_PROTOTYPES
#include <GLFW/glfw3.h>

#include <GL/glext.h>

#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include "screenshot_writer.h"

namespace moescope::viewer {

namespace {

// The error shown when a load gave nothing to show: its first read problems.
std::string nothing_readable_message(const analysis::TraceModel& model) {
  std::string message = "nothing readable in the given trace(s)";
  for (size_t i = 0; i < model.errors.size() && i < 3; ++i) {
    message += "\n" + model.errors[i].to_string();
  }
  if (model.errors.size() > 3) {
    message += "\n(" + std::to_string(model.errors.size() - 3) + " more problem(s))";
  }
  return message;
}

void drop_callback(GLFWwindow* window, int count, const char** paths) {
  auto* app = static_cast<ViewerApp*>(glfwGetWindowUserPointer(window));
  std::vector<std::string> files(paths, paths + count);
  app->on_files_dropped(std::move(files));
}

void glfw_error(int code, const char* description) {
  std::fprintf(stderr, "moescope-view: GLFW error %d: %s\n", code, description);
}

}  // namespace

ViewerApp::ViewerApp(ViewerOptions options) : options_(std::move(options)) {
  current_panel_ = options_.panel;
}

ViewerApp::~ViewerApp() {
  loading_.reset();
  tables_.reset();
  if (window_ != nullptr) {
    if (framebuffer_ != 0) glDeleteFramebuffers(1, &framebuffer_);
    if (colour_texture_ != 0) glDeleteTextures(1, &colour_texture_);
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
    glfwDestroyWindow(window_);
    glfwTerminate();
  }
}

bool ViewerApp::create_window() {
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "moescope-view: cannot initialise GLFW (no display? run under xvfb-run for "
                 "headless use)\n");
    return false;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  bool headless = !options_.screenshot_path.empty();
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  window_ = glfwCreateWindow(options_.width, options_.height, "moescope", nullptr, nullptr);
  if (window_ == nullptr) {
    std::fprintf(stderr, "moescope-view: cannot create an OpenGL 3.3 window\n");
    glfwTerminate();
    return false;
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(headless ? 0 : 1);
  glfwSetWindowUserPointer(window_, this);
  glfwSetDropCallback(window_, drop_callback);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini littering the working directory
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 0.0f;
  style.FrameRounding = 3.0f;
  style.ItemSpacing = ImVec2(8, 5);
  const char* font = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  if (std::filesystem::exists(font)) io.Fonts->AddFontFromFileTTF(font, 14.0f);
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 330");

  if (headless) {
    // Render into an offscreen framebuffer: a hidden window's default framebuffer has no
    // defined pixels, and the requested size may exceed the X screen.
    glGenTextures(1, &colour_texture_);
    glBindTexture(GL_TEXTURE_2D, colour_texture_);
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, options_.width, options_.height, 0, GL_RGBA,
                 GL_UNSIGNED_BYTE, nullptr);
    glGenFramebuffers(1, &framebuffer_);
    glBindFramebuffer(GL_FRAMEBUFFER, framebuffer_);
    glFramebufferTexture2D(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, colour_texture_, 0);
    if (glCheckFramebufferStatus(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE) {
      std::fprintf(stderr, "moescope-view: offscreen framebuffer incomplete\n");
      return false;
    }
  }
  return true;
}

void ViewerApp::start_loading(std::vector<std::string> files) {
  load_error_.clear();
  // Rank summaries (or folders of them) dropped or opened: the job overview.
  ViewerInputs inputs = expand_viewer_inputs(files);
  if (!inputs.error.empty()) {
    load_error_ = std::move(inputs.error);
    return;
  }
  if (!inputs.summaries.empty()) {
    options_.overview = inputs.summaries;
    overview_.open(std::move(inputs.summaries));
    state_.switch_to = Panel::kOverview;
    return;
  }
  files = std::move(inputs.traces);
  for (const std::string& file : files) {
    if (!std::filesystem::exists(file)) {
      load_error_ = "cannot open " + file + ": no such file";
      return;
    }
  }
  loading_ = std::make_unique<TraceLoadingJob>(std::move(files));
  // A preview belongs to the load it came from: another trace's whole load must not keep it.
  if (trace_ && trace_->preview) trace_.reset();
}

void ViewerApp::on_files_dropped(std::vector<std::string> files) {
  start_loading(std::move(files));
}

void ViewerApp::update_comparison() {
  if (against_loading_ && against_loading_->done()) {
    against_ = against_loading_->take_result();
    against_loading_.reset();
    comparison_.reset();
  }
  if (comparison_ && compared_trace_ != trace_.get()) comparison_.reset();  // the trace changed
  if (!comparison_ && against_ && trace_ && !trace_->preview) {
    comparison_ = std::make_unique<RunComparison>(compare_runs(trace_->model, against_->model));
    compared_trace_ = trace_.get();
  }
}

void ViewerApp::show_rank_detail(std::unique_ptr<LoadedTrace> detail,
                                 const DetailRequest& request) {
  loading_.reset();  // a detail replaces whatever was loading
  tables_.reset();
  trace_ = std::move(detail);
  tables_ = std::make_unique<TraceTablesJob>(*trace_);
  state_ = ViewerState{};
  timeline_.reset(*trace_);
  state_.filter.step_first = request.first_step;
  state_.filter.step_last = request.last_step;
  double begin = 0, end = 0;
  if (detail_window_range(*trace_, request, begin, end)) {
    state_.pending_focus = TimeFocus{begin, end, request.rank};
  }
  state_.switch_to = Panel::kTimeline;
}

void ViewerApp::frame() {
  glfwPollEvents();
  update_comparison();
  overview_.poll();
  DetailRequest request;
  if (auto detail = overview_.take_detail(request)) show_rank_detail(std::move(detail), request);
  if (tables_ && tables_->done()) {
    tables_->move_into(*trace_);
    tables_.reset();
  }
  if (loading_ && !loading_->done()) {
    if (auto preview = loading_->take_preview()) {
      tables_.reset();  // waits for the previous trace's tables before that trace goes
      trace_ = std::move(preview);
      state_ = ViewerState{};
      state_.switch_to = current_panel_;
      timeline_.reset(*trace_);
    }
  }
  if (loading_ && loading_->done()) {
    const bool after_preview = trace_ && trace_->preview;
    std::unique_ptr<LoadedTrace> loaded = loading_->take_result();
    loading_.reset();
    if (!after_preview && loaded->model.processes.empty()) {
      // Nothing readable (`moescope report` says the same): show why; a trace on screen stays.
      load_error_ = nothing_readable_message(loaded->model);
    } else {
      tables_.reset();  // waits for the previous trace's tables before that trace goes
      trace_ = std::move(loaded);
      tables_ = std::make_unique<TraceTablesJob>(*trace_);
      if (after_preview) {
        // The whole trace replaces its beginning: keep the view and the step/rank filter; the
        // selection (indices into the preview) goes.
        StepRankFilter filter = state_.filter;
        state_ = ViewerState{};
        state_.filter = filter;
        timeline_.extend_to(*trace_);
      } else {
        state_ = ViewerState{};
        timeline_.reset(*trace_);
      }
      state_.switch_to = current_panel_;
    }
  }
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGuiIO& io = ImGui::GetIO();
  if (framebuffer_ != 0) {
    io.DisplaySize =
        ImVec2(static_cast<float>(options_.width), static_cast<float>(options_.height));
    io.DisplayFramebufferScale = ImVec2(1, 1);
  }
  if (playing_script_) {
    std::vector<std::string> dropped;
    playing_script_ = scripted_input_.apply(io, dropped);
    if (!dropped.empty()) on_files_dropped(std::move(dropped));
  }
  ImGui::NewFrame();
  if (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_O)) browser_.open();
  if (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_Q)) glfwSetWindowShouldClose(window_, 1);

  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("moescope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_MenuBar |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoSavedSettings);
  draw_menu_and_toolbar();
  draw_panels();
  ImGui::End();
  draw_loading_overlay();
  std::vector<std::string> chosen;
  if (browser_.draw(chosen)) start_loading(chosen);

  ImGui::Render();
  int width = options_.width, height = options_.height;
  if (framebuffer_ != 0) {
    glBindFramebuffer(GL_FRAMEBUFFER, framebuffer_);
  } else {
    glfwGetFramebufferSize(window_, &width, &height);
  }
  glViewport(0, 0, width, height);
  glClearColor(0.09f, 0.09f, 0.1f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  if (framebuffer_ == 0) glfwSwapBuffers(window_);
}

bool ViewerApp::write_screenshot() {
  layout_probe().files = trace_ ? static_cast<int>(trace_->files.size()) : 0;
  layout_probe().ranks = trace_ ? static_cast<int>(trace_->model.processes.size()) : 0;
  layout_probe().step_first = state_.filter.step_first;
  layout_probe().step_last = state_.filter.step_last;
  std::vector<uint8_t> pixels(static_cast<size_t>(options_.width) * options_.height * 4);
  glBindFramebuffer(GL_FRAMEBUFFER, framebuffer_);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, options_.width, options_.height, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  std::string error;
  if (!write_png_bottom_up(options_.screenshot_path, options_.width, options_.height, pixels,
                           error) ||
      !write_layout_probe(options_.screenshot_path + ".layout.json", layout_probe(), error)) {
    std::fprintf(stderr, "moescope-view: %s\n", error.c_str());
    return false;
  }
  return true;
}

int ViewerApp::run() {
  if (!create_window()) return 1;
  if (!options_.files.empty()) start_loading(options_.files);
  if (!options_.overview.empty()) overview_.open(options_.overview);
  if (!options_.against.empty()) {
    // Read whole (no preview): the comparison needs every step.
    against_loading_ = std::make_unique<TraceLoadingJob>(options_.against, 0);
  }
  if (options_.screenshot_path.empty()) {
    while (!glfwWindowShouldClose(window_)) frame();
    return 0;
  }
  // Screenshot mode: render frames while loading, then a few more so tables and tabs settle,
  // and read back the last one.
  state_.switch_to = options_.panel;
  auto started = std::chrono::steady_clock::now();
  while (loading_ || against_loading_ || overview_.busy()) {
    frame();
    if (std::chrono::steady_clock::now() - started > std::chrono::minutes(5)) {
      std::fprintf(stderr, "moescope-view: loading took longer than 5 minutes\n");
      return 1;
    }
    // The job overview's summaries load on one thread each of the cores; frames (software GL
    // under xvfb) would take their CPU, so the wait between frames is longer then.
    std::this_thread::sleep_for(std::chrono::milliseconds(overview_.busy() ? 50 : 5));
  }
  if (overview_.active() && !overview_.overview().error.empty()) {
    std::fprintf(stderr, "moescope-view: %s\n", overview_.overview().error.c_str());
    return 1;
  }
  if (!trace_ && !overview_.active()) {
    std::fprintf(stderr, "moescope-view: %s\n",
                 load_error_.empty() ? "nothing to show" : load_error_.c_str());
    return 1;
  }
  if (!trace_ && (options_.finding > 0 || !options_.search.empty())) {
    std::fprintf(stderr,
                 "moescope-view: --finding and --search act on a trace, not a job overview\n");
    return 1;
  }
  for (const auto& problem : trace_ ? trace_->model.errors : std::vector<analysis::LoadError>()) {
    std::fprintf(stderr, "moescope-view: warning: %s\n", problem.to_string().c_str());
  }
  while (tables_) frame();  // statistics and findings, so every panel is complete
  state_.switch_to = options_.panel;
  frame();  // lay the panels out once before acting on them
  if (options_.finding > 0) {
    if (static_cast<size_t>(options_.finding) > trace_->findings.size()) {
      std::fprintf(stderr, "moescope-view: --finding %d but the report has %zu finding(s)\n",
                   options_.finding, trace_->findings.size());
      return 1;
    }
    focus_finding(*trace_, state_, options_.finding - 1);
  }
  if (!options_.search.empty()) timeline_.search(*trace_, state_, options_.search);
  state_.switch_to = options_.panel;
  for (int i = 0; i < 3; ++i) frame();
  std::string script_error;
  if (!scripted_input_.parse(options_.input, script_error)) {
    std::fprintf(stderr, "moescope-view: --input: %s\n", script_error.c_str());
    return 1;
  }
  playing_script_ = !scripted_input_.empty();
  while (playing_script_) frame();
  // A dropped trace loads like the first one; a clicked overview cell loads a rank's detail.
  while (loading_ || tables_ || overview_.busy()) frame();
  for (int i = 0; i < 3; ++i) frame();
  return write_screenshot() ? 0 : 1;
}

}  // namespace moescope::viewer
