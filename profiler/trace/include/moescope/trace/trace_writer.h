// Writes .moetrace files: the file header, then compressed, checksummed chunks of records.
// Used by the recorder's background thread and by tests/tools that synthesise traces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moescope/trace/private_descriptor.h"
#include "moescope/trace/trace_format.h"

namespace moescope::trace {

struct WriterOptions {
  int zstd_level = 1;
  // Store records as a column image (format version 2): smaller, and zstd runs several times
  // faster on it than on rows (see column_coding.cpp and bench/trace_bench.cpp).
  bool columns = true;
  bool delta_time = true;  // rows only: delta-code timestamps before compressing
  bool compress = true;
};

// Column coding of a chunk's records (chunk flag kChunkColumns, format version 2; the layout
// is in docs/trace-format.md). Keeps its scratch memory between chunks.
class ColumnEncoder {
 public:
  // Writes the column image of `bytes` of whole records to `out`. False (out unspecified)
  // when a record cannot be column-coded (unknown kind, non-zero flags, bad size): the writer
  // then stores that chunk as rows.
  bool encode(const uint8_t* records, size_t bytes, std::vector<uint8_t>& out);

 private:
  // Lane values of each kind's records, row by row (index: kind); grown, never shrunk.
  std::vector<uint32_t> rows_[kMaxRecordKind + 1];
  std::vector<uint8_t> kinds_, sizes_, tails_;
};

class TraceWriter {
 public:
  TraceWriter() = default;
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Creates `path` and writes the header with `metadata_json` (a JSON object).
  // Returns false and sets error() when the file cannot be created.
  //
  // The writer lives inside programs it does not own: some close every descriptor they did not
  // open, and then reuse the numbers. So the file's descriptor is moved to a high number, and
  // before each chunk the writer checks that the descriptor is still this file (device and
  // inode); if not, it never touches that descriptor again (it may be the program's) and
  // reopens the file by path where it left off.
  bool open(const std::string& path, std::string_view metadata_json, WriterOptions options = {});
  // Appends one chunk holding `records` (whole records, in stream order). The buffer may be
  // modified in place (delta coding of chunks stored as rows). Returns false (and counts a failed
  // write) on I/O errors.
  bool write_chunk(uint32_t stream, std::vector<uint8_t>& records,
                   ChunkType type = ChunkType::kEvents);
  bool write_chunk(uint32_t stream, uint8_t* records, size_t bytes,
                   ChunkType type = ChunkType::kEvents);
  // Chunks go to the kernel with one unbuffered write each, so a killed process loses nothing
  // already written; flush() is kept for callers that want an explicit point (it is cheap).
  void flush() {}
  void close();
  // Forgets the file (in a forked child, where the descriptor is the parent's too).
  void abandon();

  bool is_open() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t failed_writes() const { return failed_writes_; }

 private:
  bool write_all(const void* first, size_t first_bytes, const void* second, size_t second_bytes);
  // True when fd_ is still our file, or was reopened by path at bytes_written_.
  bool file_is_ours();

  int fd_ = -1;
  std::string path_;
  DescriptorIdentity file_;
  WriterOptions options_;
  std::string error_;
  std::vector<uint8_t> compressed_;
  std::vector<uint8_t> column_image_;
  ColumnEncoder column_encoder_;
  void* zstd_context_ = nullptr;
  uint64_t bytes_written_ = 0;
  uint64_t failed_writes_ = 0;
};

// Appends records to a byte buffer, for tools and tests that build traces without a recorder.
class RecordBuffer {
 public:
  template <typename Record>
  Record& append(RecordKind kind, uint64_t time, uint32_t name = 0) {
    return append_sized<Record>(kind, time, name, 0);
  }
  // Appends a record with `tail_bytes` of variable data after the fixed part; returns the
  // fixed part; tail() points at the variable part of the last appended record.
  template <typename Record>
  Record& append_sized(RecordKind kind, uint64_t time, uint32_t name, uint32_t tail_bytes) {
    uint32_t size = padded_to_8(static_cast<uint32_t>(sizeof(Record)) + tail_bytes);
    size_t offset = bytes_.size();
    bytes_.resize(offset + size, 0);
    last_ = offset;
    auto* header = reinterpret_cast<RecordHeader*>(bytes_.data() + offset);
    header->kind = static_cast<uint8_t>(kind);
    header->size = static_cast<uint16_t>(size);
    header->name = name;
    header->time = time;
    return *reinterpret_cast<Record*>(bytes_.data() + offset);
  }
  template <typename Record>
  uint8_t* tail() {
    return bytes_.data() + last_ + sizeof(Record);
  }
  // Defines string `id` in this buffer.
  void define_string(uint32_t id, std::string_view text);

  std::vector<uint8_t>& bytes() { return bytes_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  void clear() { bytes_.clear(); }

 private:
  std::vector<uint8_t> bytes_;
  size_t last_ = 0;
};

// Delta coding of a chunk's raw records (in place). Exposed for the reader and tests.
void delta_encode_times(uint8_t* records, size_t bytes);
void delta_decode_times(uint8_t* records, size_t bytes);

}  // namespace moescope::trace
