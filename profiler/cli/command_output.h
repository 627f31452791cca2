// Where a command's text goes: stdout for "" or "-", else the file named.
#pragma once

#include <string>

namespace moescope::cli {

// Writes `text` to stdout (`path` empty or "-") or to the file `path`; false when the file
// cannot be written.
bool write_command_output(const std::string& text, const std::string& path);

}  // namespace moescope::cli
