// capture_life_program: an NVTX-annotated program that exercises the ends of a process's life
// under `moescope record` (see capture_process_life_test.cpp). Modes:
//
//   fork               parent range "parent_work", forks; the child records "child_work", pops
//                      the inherited "parent_work" too and exits; prints "parent <pid> child
//                      <pid> status <code>"
//   exit-from-thread   a second thread records "last_words" and calls exit(3) while the main
//                      thread keeps recording
//   wait-for-signal    records ranges in a loop; prints "ready" once, runs until a signal
//   lines N [CODE]     prints N lines, each inside a range "line", exits with CODE
#include <nvtx3/nvToolsExt.h>
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
  if (argc >= 2 && !std::strcmp(argv[1], "exit-from-thread")) return run_exit_from_thread();
  if (argc >= 2 && !std::strcmp(argv[1], "wait-for-signal")) return run_wait_for_signal();
  if (argc >= 3 && !std::strcmp(argv[1], "lines")) {
    return run_lines(std::atoi(argv[2]), argc >= 4 ? std::atoi(argv[3]) : 0);
  }
  std::fprintf(stderr,
               "usage: %s fork | exit-from-thread | wait-for-signal | lines N [EXIT_CODE]\n",
               argv[0]);
  return 2;
}
