// Chunking of the routing map: the assignments are cut into chunks of this many; the device
// workspace holds one count per (chunk, expert). Shared by routing_map.cu and supports.cpp.
#pragma once

namespace moescope::kernels::detail {
inline constexpr int kRoutingMapAssignmentsPerChunk = 2048;
}
