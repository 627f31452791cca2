// Writes TensorBoard event files: scalar summaries framed as TFRecords, readable by TensorBoard
// and its EventAccumulator without TensorFlow or protobuf. The framing (tensorflow/core/lib/io
// record_writer): uint64 length, masked CRC-32C of the length, the serialized Event, masked
// CRC-32C of the Event; all little-endian. An Event here holds wall_time (field 1, double),
// step (2, int64) and either file_version (3, "brain.Event:2", the first record) or a summary
// (5) of values with a tag (1) and a simple_value (2, float).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace moescope::analysis {

// CRC-32C (Castagnoli) of `data`, and TFRecord's masked form of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

class TensorBoardEventWriter {
 public:
  // Creates `directory` (and its parents) and a new file
  // events.out.tfevents.<seconds>.<host>.<pid>.moescope in it; ok() says whether that worked,
  // error() why not.
  explicit TensorBoardEventWriter(const std::string& directory);
  ~TensorBoardEventWriter();
  TensorBoardEventWriter(const TensorBoardEventWriter&) = delete;
  TensorBoardEventWriter& operator=(const TensorBoardEventWriter&) = delete;

  bool ok() const { return file_ != nullptr && error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

  // One scalar at `step` (TensorBoard stores it as a float).
  void add_scalar(std::string_view tag, double value, int64_t step, double wall_time_seconds);
  // Flushes and closes; false (with error()) when a write failed.
  bool close();

 private:
  void write_record(const std::string& event);
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string error_;
};

}  // namespace moescope::analysis
