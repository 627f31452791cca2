#include "run_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace moescope::inject {
namespace {

// Async-signal-safe decimal formatting (no locale, no allocation).
char* append_number(char* at, const char* end, int64_t value) {
  char digits[24];
  int count = 0;
  bool negative = value < 0;
  uint64_t magnitude = negative ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  do {
    digits[count++] = char('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude && count < 23);
  if (negative && at < end) *at++ = '-';
  while (count > 0 && at < end) *at++ = digits[--count];
  return at;
}

// Async-signal-safe: the sequence number at the start of `trigger_path`, 0 when none.
uint64_t read_sequence(const char* trigger_path) {
  int fd = ::open(trigger_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[32];
  ssize_t got = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  uint64_t sequence = 0;
  for (ssize_t i = 0; i < got && text[i] >= '0' && text[i] <= '9'; ++i) {
    sequence = sequence * 10 + uint64_t(text[i] - '0');
  }
  return sequence;
}

bool write_trigger(const char* trigger_path, const char* scratch_path, uint64_t sequence,
                   int32_t origin_rank, uint32_t reason, int32_t code, int64_t origin_pid) {
  char line[128] = {};  // zeroed: GCC (-Wmaybe-uninitialized, ASan build) reads `end` as input
  char* at = line;
  const char* end = line + sizeof(line) - 1;
  at = append_number(at, end, int64_t(sequence));
  *at++ = ' ';
  at = append_number(at, end, origin_rank);
  *at++ = ' ';
  at = append_number(at, end, reason);
  *at++ = ' ';
  at = append_number(at, end, code);
  *at++ = ' ';
  at = append_number(at, end, origin_pid);
  *at++ = '\n';
  int fd = ::open(scratch_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool written = ::write(fd, line, size_t(at - line)) == at - line;
  ::close(fd);
  return written && ::rename(scratch_path, trigger_path) == 0;
}

}  // namespace

bool read_run_trigger(const std::string& run_dir, RunTrigger& out) {
  std::string path = run_dir + "/trigger";
  FILE* file = std::fopen(path.c_str(), "re");
  if (!file) return false;
  unsigned long long sequence = 0;
  long long pid = 0;
  int rank = -1, code = 0;
  unsigned reason = 0;
  int fields = std::fscanf(file, "%llu %d %u %d %lld", &sequence, &rank, &reason, &code, &pid);
  std::fclose(file);
  if (fields != 5) return false;
  out = {sequence, rank, reason, code, pid};
  return true;
}

uint64_t announce_run_trigger(const std::string& run_dir, int32_t origin_rank, uint32_t reason,
                              int32_t code, int64_t origin_pid) {
  std::string path = run_dir + "/trigger";
  std::string scratch = path + "." + std::to_string(::getpid());
  uint64_t sequence = read_sequence(path.c_str()) + 1;
  if (!write_trigger(path.c_str(), scratch.c_str(), sequence, origin_rank, reason, code,
                     origin_pid)) {
    return 0;
  }
  return sequence;
}

void announce_run_trigger_from_signal_handler(const char* trigger_path, const char* scratch_path,
                                              int32_t origin_rank, uint32_t reason, int32_t code,
                                              int64_t origin_pid) {
  uint64_t sequence = read_sequence(trigger_path) + 1;
  write_trigger(trigger_path, scratch_path, sequence, origin_rank, reason, code, origin_pid);
}

void write_process_entry(const std::string& run_dir, int64_t pid, const std::string& json) {
  std::string folder = run_dir + "/procs";
  ::mkdir(folder.c_str(), 0755);
  std::string path = folder + "/" + std::to_string(pid) + ".json";
  std::string scratch = path + ".tmp";
  FILE* file = std::fopen(scratch.c_str(), "we");
  if (!file) return;
  bool written = std::fwrite(json.data(), 1, json.size(), file) == json.size();
  written = std::fclose(file) == 0 && written;
  if (written) ::rename(scratch.c_str(), path.c_str());
}

void remove_process_entry(const std::string& run_dir, int64_t pid) {
  std::string path = run_dir + "/procs/" + std::to_string(pid) + ".json";
  ::unlink(path.c_str());
}

bool run_has_ranked_process(const std::string& run_dir) {
  std::string folder = run_dir + "/procs";
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return false;
  bool found = false;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (found || name.size() < 6 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    std::ifstream file(folder + "/" + name);
    nlohmann::json parsed = nlohmann::json::parse(file, nullptr, false);
    found = parsed.is_object() && parsed.value("rank", -1) >= 0;
  }
  ::closedir(dir);
  return found;
}

}  // namespace moescope::inject
