// Every Python thread's stack in a flight-recorder dump. In Python processes flight_hooks.py
// registers faulthandler on SIGUSR2, writing to the run folder's stack.PID.txt (run_folder.h);
// a dump sends SIGUSR2 and reads what faulthandler appended. Elsewhere the file does not exist
// and there are no stacks.
#pragma once

#include <atomic>
#include <string>

namespace moescope::inject {

struct PythonStackFile {
  std::string path;  // "" = no run folder
  // faulthandler's SIGUSR2 handler, as first seen once flight_hooks.py made the stack file: a
  // dump sends SIGUSR2 only while that very handler is installed (never to the program's own).
  std::atomic<void*> handler{nullptr};

  // Remembers faulthandler's SIGUSR2 handler once flight_hooks.py registered it (the stack file
  // exists then).
  void note_handler();
  // Every Python thread's stack, written by faulthandler on SIGUSR2 (at most 64 KiB); "" where
  // there is no stack file or faulthandler's handler is not the one installed now.
  std::string read_all_threads() const;
};

}  // namespace moescope::inject
