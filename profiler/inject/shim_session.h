// The shim's recording session: started by the library constructor from the environment
// (shim_options.h), stopped once by whichever exit path comes first.
#pragma once

#include <cstdint>

namespace moescope::inject {

// Starts the recorder, the signal watcher and the GPU capture. `forked_child`: called in a child of
// fork() with --fork=trace (its trace gets the child's pid). Returns false (after one warning) when
// nothing is recorded.
bool start_capture_session(bool forked_child);

// Stops the GPU capture, writes the final chunk and closes the trace; removes the file if
// it recorded nothing and its name is not one the user asked for (shim_trace_path.h).
// Idempotent and thread-safe; never called from a signal handler.
void stop_capture_session();

// Identifies the recording now on: changes whenever one starts, through this session, in a
// forked child or by the program's own moescope_recorder_stop()/moescope_recorder_start(),
// which bypass the session. The NCCL capture sets itself up again when it changes.
uint64_t recording_generation();

}  // namespace moescope::inject
