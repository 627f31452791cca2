// File descriptors that moescope keeps inside a program it does not own (the trace file, the
// signal watcher's pipe). Some programs close every descriptor they did not open and then reuse
// the numbers; these helpers keep ours out of the way and tell whether a number is still ours.
#pragma once

#include <cstdint>

namespace moescope::trace {

// What a descriptor refers to (device and inode), so a reused number can be told apart.
struct DescriptorIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
};

// Moves `fd` (close-on-exec) above the numbers a program hands out first (half the descriptor
// limit, at most 4096), where loops like `for fd in range(3, 256): close(fd)` do not reach.
// Returns the new number, or `fd` itself when there is no room.
int move_to_high_descriptor(int fd);

// The identity of `fd`; false when it is not open. Async-signal-safe (one fstat).
bool identity_of(int fd, DescriptorIdentity* identity);

// True when `fd` is open and still refers to `expected`. Async-signal-safe.
bool is_still(int fd, const DescriptorIdentity& expected);

}  // namespace moescope::trace
