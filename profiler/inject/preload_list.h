#pragma once
// LD_PRELOAD's value as ld.so reads it: entries separated by colons or spaces. Shared by the shim
// (which takes itself out for children that must not record) and `moescope record` (which puts
// the shim first).
#include <string>
#include <vector>

namespace moescope::inject {

// The non-empty entries of an LD_PRELOAD value, in order; none for nullptr.
std::vector<std::string> preload_entries(const char* value);

}  // namespace moescope::inject
