#include "moescope/trace/trace_writer.h"

#include "moescope/trace/private_descriptor.h"

#include <zlib.h>
#include <zstd.h>

#include <fcntl.h>
#include <sys/uio.h>
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
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    error_ = "cannot create '" + path + "': " + std::strerror(errno);
    return false;
  }
  fd_ = move_to_high_descriptor(fd_);
  identity_of(fd_, &file_);
  path_ = path;
  FileHeader header{};
  std::memcpy(header.magic, kFileMagic, sizeof(header.magic));
  header.version = kFormatVersion;
  header.metadata_bytes = static_cast<uint32_t>(metadata_json.size());
  if (!write_all(&header, sizeof(header), metadata_json.data(), metadata_json.size())) {
    error_ = "cannot write the header of '" + path + "': " + std::strerror(errno);
    close();
    return false;
  }
  bytes_written_ = sizeof(header) + metadata_json.size();
  if (options_.compress && !zstd_context_) zstd_context_ = ZSTD_createCCtx();
  if (zstd_context_) {
    // Set once: every chunk is one frame with its content size (the reader bounds the column
    // image by it) and no zstd checksum (the chunk CRC covers the stored bytes).
    auto* context = static_cast<ZSTD_CCtx*>(zstd_context_);
    ZSTD_CCtx_reset(context, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, options_.zstd_level);
    ZSTD_CCtx_setParameter(context, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 0);
  }
  return true;
}

bool TraceWriter::write_chunk(uint32_t stream, std::vector<uint8_t>& records, ChunkType type) {
  return write_chunk(stream, records.data(), records.size(), type);
}

bool TraceWriter::write_chunk(uint32_t stream, uint8_t* records, size_t bytes, ChunkType type) {
  if (fd_ < 0) return false;
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
  const uint8_t* payload = records;
  size_t payload_bytes = bytes;
  if (options_.columns && column_encoder_.encode(records, bytes, column_image_)) {
    payload = column_image_.data();
    payload_bytes = column_image_.size();
    header.flags |= kChunkColumns;
  } else if (options_.delta_time) {
    delta_encode_times(records, bytes);
    header.flags |= kChunkDeltaTime;
  }
  if (options_.compress && zstd_context_) {
    compressed_.resize(ZSTD_compressBound(payload_bytes));
    size_t written = ZSTD_compress2(static_cast<ZSTD_CCtx*>(zstd_context_), compressed_.data(),
                                    compressed_.size(), payload, payload_bytes);
    if (!ZSTD_isError(written)) {
      payload = compressed_.data();
      payload_bytes = written;
      header.flags |= kChunkZstd;
    }
  }
  if (payload_bytes > kMaxChunkBytes) {
    error_ = "chunk of " + std::to_string(payload_bytes) + " bytes exceeds the format's limit";
    ++failed_writes_;
    return false;
  }
  header.payload_bytes = static_cast<uint32_t>(payload_bytes);
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(&header), offsetof(ChunkHeader, crc32));
  crc = crc32(crc, payload, static_cast<uInt>(payload_bytes));
  header.crc32 = static_cast<uint32_t>(crc);
  if (!file_is_ours()) {
    ++failed_writes_;
    return false;
  }
  // A short write (disk full) is cut off again below; every earlier chunk stays readable.
  if (!write_all(&header, sizeof(header), payload, payload_bytes)) {
    error_ = std::string("write failed: ") + std::strerror(errno);
    ++failed_writes_;
    // Cut the partial chunk off, so the file stays whole chunks and later chunks (once there is
    // room again) follow the last good one.
    if (::ftruncate(fd_, static_cast<off_t>(bytes_written_)) == 0) {
      ::lseek(fd_, static_cast<off_t>(bytes_written_), SEEK_SET);
    }
    return false;
  }
  bytes_written_ += sizeof(header) + payload_bytes;
  return true;
}

bool TraceWriter::write_all(const void* first, size_t first_bytes, const void* second,
                            size_t second_bytes) {
  iovec parts[2] = {{const_cast<void*>(first), first_bytes},
                    {const_cast<void*>(second), second_bytes}};
  int index = 0;
  while (index < 2) {
    ssize_t written = ::writev(fd_, parts + index, 2 - index);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (written == 0) {
      errno = ENOSPC;
      return false;
    }
    auto remaining = static_cast<size_t>(written);
    while (index < 2 && remaining >= parts[index].iov_len) remaining -= parts[index++].iov_len;
    if (index < 2) {
      parts[index].iov_base = static_cast<uint8_t*>(parts[index].iov_base) + remaining;
      parts[index].iov_len -= remaining;
    }
  }
  return true;
}

bool TraceWriter::file_is_ours() {
  if (is_still(fd_, file_)) return true;
  // The program closed our descriptor (and may have reused its number): forget it unclosed.
  int reopened = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (reopened < 0) {
    error_ = "the program closed the trace's descriptor and '" + path_ +
             "' cannot be reopened: " + std::strerror(errno);
    fd_ = -1;
    return false;
  }
  if (!is_still(reopened, file_) ||
      ::lseek(reopened, static_cast<off_t>(bytes_written_), SEEK_SET) < 0) {
    error_ =
        "the program closed the trace's descriptor and '" + path_ + "' is no longer the trace file";
    ::close(reopened);
    fd_ = -1;
    return false;
  }
  fd_ = move_to_high_descriptor(reopened);
  return true;
}

void TraceWriter::close() {
  abandon();
}

void TraceWriter::abandon() {
  // Closed only while it is still our file: the number may be the program's by now.
  if (is_still(fd_, file_)) ::close(fd_);
  fd_ = -1;
}

void RecordBuffer::define_string(uint32_t id, std::string_view text) {
  auto& record =
      append_sized<StringRecord>(RecordKind::kString, 0, id, static_cast<uint32_t>(text.size()));
  record.length = static_cast<uint32_t>(text.size());
  std::memcpy(tail<StringRecord>(), text.data(), text.size());
}

}  // namespace moescope::trace
