#include "scripted_input.h"

#include <GLFW/glfw3.h>
#include <imgui.h>

#include <sstream>

namespace moescope::viewer {

bool ScriptedInput::parse(const std::string& script, std::string& error) {
  std::stringstream commands(script);
  std::string command;
  FrameInput at;  // the pointer stays where the last command left it
  while (std::getline(commands, command, ';')) {
    std::stringstream words(command);
    std::string verb;
    if (!(words >> verb)) continue;
    auto fail = [&] {
      error = "bad input command '" + command + "'";
      return false;
    };
    at.left = at.right = false;
    at.wheel = 0;
    at.key = -1;
    if (verb == "move") {
      if (!(words >> at.x >> at.y)) return fail();
      frames_.push_back(at);
    } else if (verb == "click") {
      if (!(words >> at.x >> at.y)) return fail();
      frames_.push_back(at);  // hover first, as a real pointer does
      at.left = true;
      frames_.push_back(at);
      at.left = false;
      frames_.push_back(at);
    } else if (verb == "wheel") {
      float notches;
      if (!(words >> at.x >> at.y >> notches)) return fail();
      frames_.push_back(at);
      at.wheel = notches;
      frames_.push_back(at);
      at.wheel = 0;
    } else if (verb == "drag") {
      float x1, y1;
      std::string button;
      if (!(words >> at.x >> at.y >> x1 >> y1)) return fail();
      bool right = (words >> button) && button == "right";
      float x0 = at.x, y0 = at.y;
      frames_.push_back(at);
      for (int step = 0; step <= 8; ++step) {
        at.x = x0 + (x1 - x0) * static_cast<float>(step) / 8.0f;
        at.y = y0 + (y1 - y0) * static_cast<float>(step) / 8.0f;
        (right ? at.right : at.left) = true;
        frames_.push_back(at);
      }
      at.left = at.right = false;
      frames_.push_back(at);
    } else if (verb == "ctrl") {
      std::string key;
      if (!(words >> key) || key.size() != 1 || key[0] < 'A' || key[0] > 'Z') return fail();
      at.ctrl = true;
      at.key = GLFW_KEY_A + (key[0] - 'A');
      frames_.push_back(at);
      at.ctrl = false;
      at.key = -1;
      frames_.push_back(at);
    } else if (verb == "drop") {
      std::string path;
      while (words >> path) at.drop.push_back(path);
      if (at.drop.empty()) return fail();
      frames_.push_back(at);
      at.drop.clear();
    } else if (verb == "key") {
      std::string key;
      int count;
      if (!(words >> key >> count) || key.size() != 1 || count < 1) return fail();
      static const std::string kKeys = "WASD";
      static const int kCodes[] = {GLFW_KEY_W, GLFW_KEY_A, GLFW_KEY_S, GLFW_KEY_D};
      size_t which = kKeys.find(key[0]);
      if (which == std::string::npos) return fail();
      for (int i = 0; i < count; ++i) {
        at.key = kCodes[which];
        frames_.push_back(at);
      }
      at.key = -1;
      frames_.push_back(at);
    } else {
      return fail();
    }
  }
  return true;
}

bool ScriptedInput::apply(ImGuiIO& io, std::vector<std::string>& dropped) {
  if (next_ >= frames_.size()) return false;
  const FrameInput& input = frames_[next_++];
  dropped = input.drop;
  io.MousePos = ImVec2(input.x, input.y);
  io.MouseDown[0] = input.left;
  io.MouseDown[1] = input.right;
  io.MouseWheel = input.wheel;
  for (int key = GLFW_KEY_A; key <= GLFW_KEY_Z; ++key) io.KeysDown[key] = key == input.key;
  io.KeyCtrl = input.ctrl;
  // A fixed frame time, so held keys move the view by the same amount on every machine.
  io.DeltaTime = 1.0f / 60.0f;
  return true;
}

}  // namespace moescope::viewer
