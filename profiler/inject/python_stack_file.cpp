#include "python_stack_file.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace moescope::inject {

void PythonStackFile::note_handler() {
  if (handler.load() || path.empty()) return;
  struct stat file;
  struct sigaction current;
  if (::stat(path.c_str(), &file) != 0 || ::sigaction(SIGUSR2, nullptr, &current) != 0) {
    return;
  }
  if (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN) {
    handler = reinterpret_cast<void*>(current.sa_handler);
  }
}

std::string PythonStackFile::read_all_threads() const {
  struct stat before;
  if (path.empty() || ::stat(path.c_str(), &before) != 0) return {};
  // Only while faulthandler's handler is installed (Python removes it when it finalizes, and
  // the program may install its own later).
  struct sigaction current;
  if (::sigaction(SIGUSR2, nullptr, &current) != 0 ||
      reinterpret_cast<void*>(current.sa_handler) != handler.load() ||
      current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN) {
    return {};
  }
  if (::kill(::getpid(), SIGUSR2) != 0) return {};
  off_t size = before.st_size;
  struct timespec pause = {0, 10 * 1000 * 1000};
  for (int waited = 0, stable = 0; waited < 50 && stable < 3; ++waited) {
    nanosleep(&pause, nullptr);
    struct stat now;
    if (::stat(path.c_str(), &now) != 0) return {};
    stable = now.st_size == size && size > before.st_size ? stable + 1 : 0;
    size = now.st_size;
  }
  std::ifstream file(path);
  if (!file) return {};
  file.seekg(before.st_size);
  std::stringstream text;
  text << file.rdbuf();
  return text.str().substr(0, 64 * 1024);
}

}  // namespace moescope::inject
