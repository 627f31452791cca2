#include "text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>

namespace moe_train {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("moe_train: cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// SplitMix64: a tiny, well-mixed hash so every (seed, rank, step) gets an independent stream.
uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

}  // namespace

TextCorpus::TextCorpus(const std::string& path, int64_t seq_len)
    : source_(path), seq_len_(seq_len) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file() && entry.path().extension() == ".txt") {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) text_ += read_file(file);
    num_files_ = files.size();
    if (files.empty()) throw std::runtime_error("moe_train: no *.txt file in " + path);
  } else if (fs::is_regular_file(path, error)) {
    text_ = read_file(path);
    num_files_ = 1;
  } else {
    throw std::runtime_error("moe_train: --data " + path + " is neither a file nor a folder");
  }
  if (static_cast<int64_t>(text_.size()) < 2 * (seq_len + 1)) {
    std::ostringstream message;
    message << "moe_train: the text in " << path << " has " << text_.size()
            << " bytes, fewer than two sequences of --seq-len " << seq_len << " + 1";
    throw std::runtime_error(message.str());
  }
}

std::vector<int64_t> TextCorpus::batch(uint64_t seed, int64_t rank, int64_t step,
                                       int64_t batch) const {
  std::mt19937_64 generator(
      mix(seed ^ mix(static_cast<uint64_t>(rank) ^ mix(static_cast<uint64_t>(step)))));
  const uint64_t num_starts = text_.size() - static_cast<uint64_t>(seq_len_);
  std::vector<int64_t> tokens;
  tokens.reserve(static_cast<size_t>(batch * (seq_len_ + 1)));
  for (int64_t row = 0; row < batch; ++row) {
    const uint64_t start = generator() % num_starts;
    for (int64_t i = 0; i <= seq_len_; ++i) {
      tokens.push_back(static_cast<unsigned char>(text_[start + static_cast<uint64_t>(i)]));
    }
  }
  return tokens;
}

std::string default_corpus_path() {
  return MOE_TRAIN_DEFAULT_DATA_DIR;
}

}  // namespace moe_train
