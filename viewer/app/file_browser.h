// A minimal built-in file browser: walk directories, tick trace files (several ranks at once)
// and open them together.
#pragma once

#include <string>
#include <vector>

namespace moescope::viewer {

class FileBrowser {
 public:
  void open();
  // Draws the popup when open; returns true and fills `chosen` when the user confirmed.
  bool draw(std::vector<std::string>& chosen);

 private:
  void list_directory();

  bool open_ = false;
  std::string directory_;
  struct Entry {
    std::string name;
    bool is_directory = false;
    bool is_trace = false;
    bool ticked = false;
    uintmax_t bytes = 0;
  };
  std::vector<Entry> entries_;
  std::string error_;
};

}  // namespace moescope::viewer
