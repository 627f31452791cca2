// capture_life_program: an NVTX-annotated program that exercises the ends of a process's life
// under `moescope record` (see capture_process_life_test.cpp). Modes:
//
//   fork               parent range "parent_work", forks; the child records "child_work", pops
//                      the inherited "parent_work" too and exits; prints "parent <pid> child
//                      <pid> status <code>"
//   fork-many N        records a burst of "busy" ranges (work for the flush thread), forks a
//                      child, N times one after the other; each child records "child_work"
//                      and exits. A child still running after 10 s is killed as hung; prints
//                      "forked N hung H", exits 1 if H > 0
//   exit-from-thread   a second thread records "last_words" and calls exit(3) while the main
//                      thread keeps recording
//   wait-for-signal    records ranges in a loop; prints "ready" once, runs until a signal
//   lines N [CODE]     prints N lines, each inside a range "line", exits with CODE
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

void sleep_ms(int milliseconds) {
  struct timespec pause = {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
  nanosleep(&pause, nullptr);
}

int run_fork() {
  nvtxRangePushA("parent_work");
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    nvtxRangePushA("child_work");
    sleep_ms(20);
    nvtxRangePop();
    nvtxRangePop();  // closes "parent_work", pushed before the fork: not in the child's trace
    std::exit(0);    // exit(): the child's trace is closed by the shim's atexit handler
  }
  int status = 0;
  waitpid(child, &status, 0);
  nvtxRangePop();
  std::printf("parent %d child %d status %d\n", static_cast<int>(getpid()), static_cast<int>(child),
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

// Waits up to `limit_ms` for `child`; kills it if it is still running. True if it exited 0.
bool wait_or_kill(pid_t child, int limit_ms) {
  for (int waited = 0; waited < limit_ms; ++waited) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) return WIFEXITED(status) && !WEXITSTATUS(status);
    sleep_ms(1);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return false;
}

int run_fork_many(int children) {
  // NVTX initializes itself once, on the first call (loading the shim as its tool); a fork
  // while another thread is inside that leaves NVTX in the child waiting for it forever.
  nvtxInitialize(nullptr);
  int hung = 0;
  for (int i = 0; i < children; ++i) {
    // A burst of ranges right before the fork: the flush thread (every 1 ms) has work to drain
    // when the fork comes. Only this thread records, so every lock a child could find held
    // belongs to the shim's own threads.
    for (int range = 0; range < 2000; ++range) {
      nvtxRangePushA("busy");
      nvtxRangePop();
    }
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      nvtxRangePushA("child_work");
      nvtxRangePop();
      std::exit(0);
    }
    if (child < 0 || !wait_or_kill(child, 10000)) ++hung;
  }
  std::printf("forked %d hung %d\n", children, hung);
  return hung ? 1 : 0;
}

int run_exit_from_thread() {
  std::atomic<bool> started{false};
  std::thread exiter([&] {
    while (!started) sleep_ms(1);
    sleep_ms(50);
    nvtxMarkA("last_words");
    std::printf("exiting from a thread\n");
    std::fflush(stdout);
    std::exit(3);
  });
  for (;;) {
    nvtxRangePushA("main_loop");
    started = true;
    sleep_ms(1);
    nvtxRangePop();
  }
}

int run_wait_for_signal() {
  bool announced = false;
  for (;;) {
    nvtxRangePushA("busy");
    sleep_ms(2);
    nvtxRangePop();
    if (!announced) {
      std::printf("ready\n");
      std::fflush(stdout);
      announced = true;
    }
  }
}

int run_lines(int lines, int exit_code) {
  for (int i = 0; i < lines; ++i) {
    nvtxRangePushA("line");
    std::printf("line %d\n", i);
    nvtxRangePop();
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && !std::strcmp(argv[1], "fork")) return run_fork();
  if (argc >= 3 && !std::strcmp(argv[1], "fork-many")) return run_fork_many(std::atoi(argv[2]));
  if (argc >= 2 && !std::strcmp(argv[1], "exit-from-thread")) return run_exit_from_thread();
  if (argc >= 2 && !std::strcmp(argv[1], "wait-for-signal")) return run_wait_for_signal();
  if (argc >= 3 && !std::strcmp(argv[1], "lines")) {
    return run_lines(std::atoi(argv[2]), argc >= 4 ? std::atoi(argv[3]) : 0);
  }
  std::fprintf(stderr,
               "usage: %s fork | fork-many N | exit-from-thread | wait-for-signal | lines N "
               "[EXIT_CODE]\n",
               argv[0]);
  return 2;
}
