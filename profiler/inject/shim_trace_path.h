// Which file each recorded process writes. Every process of a `moescope record` run expands
// the same pattern, so the shim keeps them apart:
//
//   process                                   pattern run.%r.moetrace becomes
//   rank 3 (RANK=3)                           run.3.moetrace
//   no rank (a launcher, a helper process)    run.norank.<pid>.moetrace
//   forked child (--fork=trace)               run.3.<pid>.moetrace
//   same expanded path as a sibling already   run.3.<pid>.moetrace (e.g. a compile worker that
//   recording in this run                     inherited RANK=3)
#pragma once

#include <string>

namespace moescope::inject {

// True if `pattern` holds the placeholder %<letter> (a literal "%%" does not count).
bool pattern_has_placeholder(const std::string& pattern, char letter);

// Adds ".%p" before the file extension (after the last '/'), or at the end when there is none;
// returns the pattern unchanged if it already holds %p.
std::string pattern_with_pid(const std::string& pattern);

// The pattern this process records to: %r of an unknown rank becomes "norank" plus the pid,
// and a forked child always gets its pid.
std::string pattern_for_process(const std::string& pattern, bool rank_known, bool forked_child);

// True if `path` is a trace whose metadata names `session` and another pid: another process of
// this run writes it. Not taken: a file of an older run (another session), or one written by
// this very pid before it called exec() (a wrapper script exec'ing the real program; the old
// image never closed its trace and is replaced by the new one).
bool trace_taken_by_session(const std::string& path, const std::string& session, int pid);

// True if the trace holds at least one event of the program: anything beyond thread names,
// strings, statistics and the shim's own notes (instants in the "moescope" domain). Large
// files are assumed to hold events without reading them.
bool trace_has_events(const std::string& path);

// True for a trace of `session` whose name the shim chose (no rank, forked child, name taken)
// and that holds no event: what a helper process leaves when it exec'd a program without the
// shim (a static binary) or ended without exit(). `moescope record` removes these at the end.
bool trace_is_empty_helper(const std::string& path, const std::string& session);

}  // namespace moescope::inject
