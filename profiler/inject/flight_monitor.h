// The flight recorder's triggers inside the shim (moescope record --flight-recorder; the ring
// itself is profiler/recorder/flight_ring.h, the design in docs/flight-recorder.md):
//
//   SIGUSR1 ------------------------------.
//   run folder: a peer's trigger ---------+--> monitor thread ("moescope-flight", 100 ms tick)
//   hang: no step/collective progress ----|      | dump(): drain, write the ring, announce
//   slow step: > k x rolling median ------'      v
//   moescope_trigger() (Python exception) ---> handle_trigger() --> Recorder::dump()
//   fatal signal ---> handler: the ring as raw chunks (async-signal-safe), announce, re-raise
//   exit(non-zero) ---> on_exit handler: dump before the recording stops
//
// A trigger of this process is announced in the run folder (run_folder.h) so that every other
// process of the job dumps as well ("peer").
#pragma once

namespace moescope::inject {

// Starts the monitor thread and installs the SIGUSR1 and fatal-signal handlers where the
// program left those signals at their default. Once per recording session under the flight
// recorder; does nothing otherwise.
void start_flight_monitor();
// Before the recording stops (exit, SIGINT/SIGTERM): a peer's trigger not yet served is
// dumped now (the launcher may be killing this rank because another one failed), then the
// monitor thread ends. SIGINT/SIGTERM alone do not dump.
void stop_flight_monitor();
// In a forked child: the parent's monitor thread does not exist here.
void forget_flight_monitor_after_fork();
// on_exit (registered by the monitor once main runs): a non-zero status dumps (when this process
// has not dumped yet).
void flight_monitor_at_exit(int status);

}  // namespace moescope::inject
