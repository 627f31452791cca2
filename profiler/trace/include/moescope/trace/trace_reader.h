// Reads .moetrace files chunk by chunk, recovering from damage: a bad chunk is reported with
// the file and byte offset and skipped by resynchronising on the next chunk magic, so every
// intact chunk is still read. Never throws on bad data and never trusts a length unchecked.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "moescope/trace/trace_format.h"

namespace moescope::trace {

// Decodes column-coded chunks (kChunkColumns; see ColumnEncoder in trace_writer.h). Keeps its
// scratch memory between chunks.
class ColumnDecoder {
 public:
  // Rebuilds `raw_bytes` of records from a column image. Checks every count and length
  // before using it; on damage returns false with `error` saying what is wrong.
  bool decode(const uint8_t* image, size_t image_bytes, uint8_t* records, size_t raw_bytes,
              std::string& error);

 private:
  std::vector<uint32_t> columns_;
};

struct ReadError {
  std::string file;
  uint64_t offset = 0;  // byte offset in the file where the problem starts
  std::string message;
  std::string to_string() const;  // "file:offset: message"
};

// A view of one record inside a decoded chunk.
class RecordView {
 public:
  RecordView(const uint8_t* data, uint32_t size) : data_(data), size_(size) {}
  RecordKind kind() const { return static_cast<RecordKind>(data_[0]); }
  const RecordHeader& header() const { return *reinterpret_cast<const RecordHeader*>(data_); }
  uint32_t size() const { return size_; }
  // Copy of the fixed part (records are packed; copying avoids unaligned access).
  template <typename Record>
  Record as() const {
    Record record;
    std::memcpy(&record, data_, sizeof(Record));
    return record;
  }
  // Variable tail after the fixed part of `Record`.
  template <typename Record>
  const uint8_t* tail() const {
    return data_ + sizeof(Record);
  }
  template <typename Record>
  uint32_t tail_bytes() const {
    return size_ - static_cast<uint32_t>(sizeof(Record));
  }
  const uint8_t* data() const { return data_; }

 private:
  const uint8_t* data_;
  uint32_t size_;
};

// Calls `handler.on(record.as<XRecord>(), record)` for the record's kind: one named handler per
// kind of record_schema.h (a handler declares one `on` overload per record struct, so a kind it
// forgets does not compile), `handler.on_unknown(record)` for a kind the schema does not know.
template <typename Handler>
inline void dispatch_record(const RecordView& record, Handler& handler) {
  switch (record.kind()) {
#define MOESCOPE_DISPATCH_CASE(Enum, number, Struct, ...) \
  case RecordKind::Enum:                                  \
    return handler.on(record.as<Struct>(), record);
    MOESCOPE_RECORD_KINDS(MOESCOPE_DISPATCH_CASE)
#undef MOESCOPE_DISPATCH_CASE
    default:
      return handler.on_unknown(record);
  }
}

// One decoded chunk: validated records of one stream.
struct Chunk {
  ChunkType type = ChunkType::kEvents;
  uint32_t stream = 0;
  uint64_t file_offset = 0;
  std::vector<uint8_t> records;  // raw, delta coding undone, every record size-checked

  class Iterator {
   public:
    Iterator(const uint8_t* at) : at_(at) {}
    RecordView operator*() const {
      uint16_t size;
      std::memcpy(&size, at_ + 2, sizeof(size));
      return RecordView(at_, size);
    }
    Iterator& operator++() {
      uint16_t size;
      std::memcpy(&size, at_ + 2, sizeof(size));
      at_ += size;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return at_ != other.at_; }

   private:
    const uint8_t* at_;
  };
  Iterator begin() const { return Iterator(records.data()); }
  Iterator end() const { return Iterator(records.data() + records.size()); }
};

class TraceReader {
 public:
  TraceReader() = default;
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Opens `path` and reads its header and metadata. False (with errors()) if it is not a
  // readable trace at all (missing, wrong magic, future version, corrupt header).
  bool open(const std::string& path);
  // Opens an in-memory image (fuzzing, tests). `name` is used in error messages.
  bool open_memory(const uint8_t* data, size_t size, const std::string& name);

  // Decodes the next intact chunk into `chunk`. Damaged chunks are skipped and reported in
  // errors(). Returns false at the end of the file.
  bool next_chunk(Chunk& chunk);

  const std::string& metadata_json() const { return metadata_json_; }
  uint32_t version() const { return version_; }
  const std::vector<ReadError>& errors() const { return errors_; }
  // True once a kEnd chunk was read: the writer closed the file cleanly.
  bool saw_end() const { return saw_end_; }
  uint64_t file_size() const { return size_; }
  uint64_t position() const { return position_; }
  const std::string& path() const { return path_; }

  // Growing files (`moescope top`, analysis/live_rank_state.h). Reading goes on from `offset`,
  // a chunk boundary an earlier reader of the same file stopped at; false (position unchanged)
  // when it is before the first chunk or past the end.
  bool seek_chunk(uint64_t offset);
  // With `stop` set, a chunk that runs past the end of the file with nothing after it (a writer
  // is still writing it) ends next_chunk() without an error and leaves position() at its
  // start, where the next refresh retries it. A damaged length is reported as usual when
  // another chunk follows, else once enough bytes follow (its checksum fails).
  void stop_at_partial_chunk(bool stop) { stop_at_partial_ = stop; }
  // Where the chunks start (after the header and metadata).
  uint64_t chunks_begin() const { return chunks_begin_; }

 private:
  bool partial_chunk_at(uint64_t offset) const;
  void add_error(uint64_t offset, std::string message);
  bool read_header();
  bool decode_chunk_at(uint64_t offset, Chunk& chunk, uint64_t& next_offset);
  uint64_t find_next_magic(uint64_t from) const;

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t position_ = 0;
  void* mapping_ = nullptr;  // mmap of the file, or null for memory images
  uint32_t version_ = 0;
  std::string metadata_json_;
  std::vector<ReadError> errors_;
  std::vector<uint8_t> scratch_;  // decompressed column image
  ColumnDecoder column_decoder_;
  void* zstd_context_ = nullptr;
  bool saw_end_ = false;
  bool stop_at_partial_ = false;
  uint64_t chunks_begin_ = 0;
};

// Validates a decoded payload: every record has a known kind, a size that is a multiple of
// 8, at least its fixed size, consistent with its tail and within the payload. Returns an
// empty string when valid, else what is wrong and at which payload offset (in error_offset).
std::string validate_records(const uint8_t* records, size_t bytes, size_t& error_offset);

}  // namespace moescope::trace
