// Scripted mouse and keyboard input for screenshot mode, so tests drive the real panels the way
// a person does (wheel, drag, click, keys) and then capture the result. Commands, separated by
// ';':  move X Y | click X Y | wheel X Y NOTCHES | drag X0 Y0 X1 Y1 [right] | key W|A|S|D FRAMES
// | drop PATH... (files dropped on the window, as GLFW's drop callback delivers them)
// | ctrl KEY (a Ctrl+letter shortcut, e.g. ctrl O opens the file browser)
#pragma once

#include <string>
#include <vector>

struct ImGuiIO;

namespace moescope::viewer {

class ScriptedInput {
 public:
  // False (with `error`) when the script does not parse.
  bool parse(const std::string& script, std::string& error);
  // Sets this frame's input on `io` (call between the backend's NewFrame and ImGui::NewFrame).
  // Returns false once the script is done.
  // `dropped` receives the files of a drop command.
  bool apply(ImGuiIO& io, std::vector<std::string>& dropped);
  bool empty() const { return frames_.empty(); }

 private:
  struct FrameInput {
    float x = 0, y = 0;
    bool left = false, right = false;
    float wheel = 0;
    int key = -1;  // GLFW key code held this frame
    std::vector<std::string> drop;
    bool ctrl = false;
  };
  std::vector<FrameInput> frames_;
  size_t next_ = 0;
};

}  // namespace moescope::viewer
