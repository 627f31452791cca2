#include "sample_runs.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace moescope::samples_test {

CommandResult run_shell(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buffer;
  size_t got;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), got);
  }
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The environment wins (CTest sets it); the configured trees are the fallback, so the test
// binary also runs on its own.
std::string build_dir() {
  const char* dir = std::getenv("MOESCOPE_BUILD_DIR");
  return dir && *dir ? dir : MOESCOPE_SAMPLES_BUILD_DIR;
}

std::string source_dir() {
  const char* dir = std::getenv("MOESCOPE_SOURCE_DIR");
  return dir && *dir ? dir : MOESCOPE_SAMPLES_SOURCE_DIR;
}

std::string fresh_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(build_dir()) / "tests" / "samples_out" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

namespace {

// Binds `port` (0 = any) on loopback; returns the bound port or -1.
int try_bind(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  int bound = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    socklen_t length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      bound = ntohs(address.sin_port);
    }
  }
  ::close(fd);
  return bound;
}

}  // namespace

int free_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int port = try_bind(0);
    if (port > 0 && port < 65535 && try_bind(port + 1) == port + 1) return port;
  }
  throw std::runtime_error("no free pair of loopback ports found");
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::map<int64_t, std::string> parse_loss_lines(const std::string& output) {
  static const std::regex line(R"(^step (\d+) loss (\S+) )");
  std::map<int64_t, std::string> losses;
  std::istringstream in(output);
  for (std::string text; std::getline(in, text);) {
    std::smatch match;
    if (std::regex_search(text, match, line)) losses[std::stoll(match[1])] = match[2];
  }
  return losses;
}

std::map<int64_t, double> parse_losses(const std::string& output) {
  std::map<int64_t, double> losses;
  for (const auto& [step, text] : parse_loss_lines(output)) losses[step] = std::stod(text);
  return losses;
}

std::map<int64_t, std::vector<double>> parse_max_over_mean(const std::string& output) {
  static const std::regex line(R"(^step (\d+) .* max/mean((?: L\d+ \S+)+) dropped)");
  static const std::regex layer(R"( L\d+ (\S+))");
  std::map<int64_t, std::vector<double>> result;
  std::istringstream in(output);
  for (std::string text; std::getline(in, text);) {
    std::smatch match;
    if (!std::regex_search(text, match, line)) continue;
    const std::string layers = match[2];
    std::vector<double>& values = result[std::stoll(match[1])];
    for (auto it = std::sregex_iterator(layers.begin(), layers.end(), layer);
         it != std::sregex_iterator(); ++it) {
      values.push_back(std::stod((*it)[1]));
    }
  }
  return result;
}

std::map<ExpertLoadKey, std::vector<int64_t>> parse_expert_load_lines(const std::string& output) {
  static const std::regex line(R"(expert_load rank (\d+) step (\d+) layer (\d+) local ([\d ]+))");
  std::map<ExpertLoadKey, std::vector<int64_t>> loads;
  std::istringstream in(output);
  for (std::string text; std::getline(in, text);) {
    std::smatch match;
    if (!std::regex_search(text, match, line)) continue;
    ExpertLoadKey key{std::stoi(match[1]), std::stoll(match[2]),
                      static_cast<uint32_t>(std::stoul(match[3]))};
    std::istringstream numbers(match[4].str());
    std::vector<int64_t>& values = loads[key];
    for (int64_t value; numbers >> value;) values.push_back(value);
  }
  return loads;
}

double mean_of_first(const std::map<int64_t, double>& values, size_t count) {
  double sum = 0;
  size_t n = 0;
  for (auto it = values.begin(); it != values.end() && n < count; ++it, ++n) sum += it->second;
  return n ? sum / static_cast<double>(n) : 0.0;
}

double mean_of_last(const std::map<int64_t, double>& values, size_t count) {
  double sum = 0;
  size_t n = 0;
  for (auto it = values.rbegin(); it != values.rend() && n < count; ++it, ++n) sum += it->second;
  return n ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace moescope::samples_test
