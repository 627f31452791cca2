#include "moescope/profiler/trace_writer.h"

#include <zlib.h>
#include <zstd.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace moescope::trace {

TraceWriter::~TraceWriter() {
  close();
  if (zstd_context_) ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(zstd_context_));
}

bool TraceWriter::open(const std::string& path, std::string_view metadata_json,
                       WriterOptions options) {
  close();
  options_ = options;
  if (metadata_json.size() > kMaxMetadataBytes) {
    error_ = "metadata larger than " + std::to_string(kMaxMetadataBytes) + " bytes";
    return false;
  }
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) {
    error_ = "cannot create '" + path + "': " + std::strerror(errno);
    return false;
  }
  FileHeader header{};
  std::memcpy(header.magic, kFileMagic, sizeof(header.magic));
  header.version = kFormatVersion;
  header.metadata_bytes = static_cast<uint32_t>(metadata_json.size());
  bool ok = std::fwrite(&header, sizeof(header), 1, file_) == 1 &&
            std::fwrite(metadata_json.data(), 1, metadata_json.size(), file_) ==
                metadata_json.size() &&
            std::fflush(file_) == 0;
  if (!ok) {
    error_ = "cannot write the header of '" + path + "': " + std::strerror(errno);
    close();
    return false;
  }
  bytes_written_ = sizeof(header) + metadata_json.size();
  if (options_.compress && !zstd_context_) zstd_context_ = ZSTD_createCCtx();
  return true;
}

bool TraceWriter::write_chunk(uint32_t stream, std::vector<uint8_t>& records, ChunkType type) {
  return write_chunk(stream, records.data(), records.size(), type);
}

bool TraceWriter::write_chunk(uint32_t stream, uint8_t* records, size_t bytes, ChunkType type) {
  if (!file_) return false;
  if (bytes > kMaxChunkBytes) {
    error_ = "chunk of " + std::to_string(bytes) + " bytes exceeds the format's limit";
    ++failed_writes_;
    return false;
  }
  ChunkHeader header{};
  header.magic = kChunkMagic;
  header.type = static_cast<uint16_t>(type);
  header.stream = stream;
  header.raw_bytes = static_cast<uint32_t>(bytes);
  if (options_.delta_time) {
    delta_encode_times(records, bytes);
    header.flags |= kChunkDeltaTime;
  }
  const uint8_t* payload = records;
  size_t payload_bytes = bytes;
  if (options_.compress && zstd_context_) {
    compressed_.resize(ZSTD_compressBound(bytes));
    size_t written = ZSTD_compressCCtx(static_cast<ZSTD_CCtx*>(zstd_context_), compressed_.data(),
                                       compressed_.size(), records, bytes, options_.zstd_level);
    if (!ZSTD_isError(written)) {
      payload = compressed_.data();
      payload_bytes = written;
      header.flags |= kChunkZstd;
    }
  }
  header.payload_bytes = static_cast<uint32_t>(payload_bytes);
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(&header), offsetof(ChunkHeader, crc32));
  crc = crc32(crc, payload, static_cast<uInt>(payload_bytes));
  header.crc32 = static_cast<uint32_t>(crc);
  // One buffered write per part; a short write (disk full) leaves a truncated chunk that the
  // reader skips, and every earlier chunk stays readable.
  bool ok = std::fwrite(&header, sizeof(header), 1, file_) == 1 &&
            std::fwrite(payload, 1, payload_bytes, file_) == payload_bytes;
  if (!ok) {
    error_ = std::string("write failed: ") + std::strerror(errno);
    ++failed_writes_;
    std::clearerr(file_);
    return false;
  }
  bytes_written_ += sizeof(header) + payload_bytes;
  return true;
}

void TraceWriter::flush() {
  if (file_ && std::fflush(file_) != 0) {
    error_ = std::string("flush failed: ") + std::strerror(errno);
    ++failed_writes_;
    std::clearerr(file_);
  }
}

void TraceWriter::close() {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
}

void TraceWriter::abandon() {
  if (file_) ::close(fileno(file_));
  file_ = nullptr;
}

void RecordBuffer::define_string(uint32_t id, std::string_view text) {
  auto& record = append_sized<StringRecord>(RecordKind::kString, 0, id,
                                            static_cast<uint32_t>(text.size()));
  record.length = static_cast<uint32_t>(text.size());
  std::memcpy(tail<StringRecord>(), text.data(), text.size());
}

}  // namespace moescope::trace
