// printf-style formatting into a std::string, for the report's and the findings' sentences.
#pragma once

#include <cstdio>
#include <string>

namespace moescope::analysis {

// The text `pattern` makes of `values` (std::snprintf rules), cut at 511 characters: one
// sentence of a finding or a report line, never a whole document.
std::string printf_string(const char* pattern, auto... values) {
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), pattern, values...);
  return buffer;
}

}  // namespace moescope::analysis
