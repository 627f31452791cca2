#include "preload_list.h"

namespace moescope::inject {

std::vector<std::string> preload_entries(const char* value) {
  std::vector<std::string> entries;
  if (!value) return entries;
  std::string entry;
  for (const char* c = value;; ++c) {
    if (*c == ':' || *c == ' ' || *c == '\0') {
      if (!entry.empty()) entries.push_back(entry);
      entry.clear();
      if (*c == '\0') break;
    } else {
      entry += *c;
    }
  }
  return entries;
}

}  // namespace moescope::inject
