#include "moescope/trace/private_descriptor.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moescope::trace {

int move_to_high_descriptor(int fd) {
  rlimit limit{};
  if (fd < 0 || getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < 64) return fd;
  rlim_t floor = limit.rlim_cur / 2 < 4096 ? limit.rlim_cur / 2 : 4096;
  if (static_cast<rlim_t>(fd) >= floor) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(floor));
  if (moved < 0) return fd;
  ::close(fd);
  return moved;
}

bool identity_of(int fd, DescriptorIdentity* identity) {
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0) return false;
  identity->device = info.st_dev;
  identity->inode = info.st_ino;
  return true;
}

bool is_still(int fd, const DescriptorIdentity& expected) {
  DescriptorIdentity now;
  return identity_of(fd, &now) && now.device == expected.device && now.inode == expected.inode;
}

}  // namespace moescope::trace
