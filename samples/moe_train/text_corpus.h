// The training text and its batches. Byte-level tokens (vocabulary 256): no tokenizer file to
// ship, and any text works. Torch-free.
//
// Batches are a pure function of (seed, rank, step): a resumed run reads exactly the batches
// the uninterrupted run would have read, and each rank of a data-parallel group reads its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe_train {

inline constexpr int64_t kVocabularySize = 256;

class TextCorpus {
 public:
  /// Reads `path`: a file, or a folder whose *.txt files are concatenated in name order.
  /// Throws std::runtime_error naming the path when nothing readable is there or the text is
  /// shorter than two sequences.
  TextCorpus(const std::string& path, int64_t seq_len);

  /// Token ids of `batch` windows of seq_len + 1 bytes, row-major [batch, seq_len + 1]:
  /// inputs are columns [0, seq_len), targets columns [1, seq_len + 1).
  std::vector<int64_t> batch(uint64_t seed, int64_t rank, int64_t step, int64_t batch) const;

  size_t size_bytes() const { return text_.size(); }
  size_t num_files() const { return num_files_; }
  const std::string& source() const { return source_; }

 private:
  std::string text_;
  std::string source_;
  size_t num_files_ = 0;
  int64_t seq_len_;
};

/// The folder of the texts shipped with the sample (compiled in).
std::string default_corpus_path();

}  // namespace moe_train
