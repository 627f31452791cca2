// Whether the process that writes a trace still exists, asked of this host's kernel: `moescope
// top` tells a rank that was killed without closing its trace (SIGKILL, the OOM killer) from one
// that is hung, where the process runs on the machine top runs on.
#pragma once

#include <cstdint>
#include <string>

namespace moescope::cli {

// This machine's host name, as the recorder writes it into a trace's metadata ("host").
const std::string& this_host_name();

// True only when the process is known gone: `host` is this machine and no process `pid`
// exists. A process of another host, or one that cannot be asked, is not called gone.
// (A trace read from another pid namespace on this host, e.g. another container with the same
// host name, could be called gone wrongly: containers usually have host names of their own.)
bool process_gone(const std::string& host, int64_t pid);

}  // namespace moescope::cli
