// SIGINT/SIGTERM: the trace is completed before the program dies of the signal.
//
// The shim keeps its own handler (a trampoline) installed for both signals and interposes
// sigaction()/signal(), so the program sees and changes only its own disposition:
//
//   program's disposition   on the signal, the trampoline ...
//   a handler               calls it (the program decides; a later exit() flushes the trace)
//   SIG_IGN                 is not installed at all (the kernel ignores the signal)
//   SIG_DFL                 asks the watcher thread for the final flush, waits for it (bounded),
//                           then restores SIG_DFL and re-raises: the default action happens
//
// Python is why the interposition matters: it installs its own SIGINT handler, and on an
// uncaught KeyboardInterrupt it sets SIG_DFL and kills itself with SIGINT, skipping atexit.
//
// From the handler only async-signal-safe calls are made: an atomic store, write() to a pipe,
// nanosleep(). The flush itself runs on the watcher thread, which blocks both signals.
#pragma once

namespace moescope::inject {

// Takes over SIGINT/SIGTERM as described above. Once per process.
void install_signal_trampolines();
// Starts the thread that completes the trace when a signal asks for it. Once per session.
void start_signal_watcher();
// In a forked child: the parent's watcher thread is gone and its pipe is shared; drop both.
void forget_signal_watcher_after_fork();

}  // namespace moescope::inject
