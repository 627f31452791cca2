#include "moescope/trace/trace_reader.h"
#include "moescope/trace/record_kinds.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>

#include "moescope/trace/trace_writer.h"

namespace moescope::trace {

std::string ReadError::to_string() const {
  return file + ":" + std::to_string(offset) + ": " + message;
}

TraceReader::~TraceReader() {
  if (mapping_) munmap(mapping_, size_);
  if (zstd_context_) ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(zstd_context_));
}

void TraceReader::add_error(uint64_t offset, std::string message) {
  errors_.push_back(ReadError{path_, offset, std::move(message)});
}

bool TraceReader::open(const std::string& path) {
  path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    add_error(0, std::string("cannot open: ") + std::strerror(errno));
    return false;
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    add_error(0, "not a regular file");
    ::close(fd);
    return false;
  }
  size_ = static_cast<uint64_t>(info.st_size);
  if (size_ > 0) {
    void* mapping = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      add_error(0, std::string("cannot map: ") + std::strerror(errno));
      ::close(fd);
      return false;
    }
    mapping_ = mapping;
    data_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(fd);
  return read_header();
}

bool TraceReader::open_memory(const uint8_t* data, size_t size, const std::string& name) {
  path_ = name;
  data_ = data;
  size_ = size;
  return read_header();
}

bool TraceReader::read_header() {
  if (size_ < sizeof(FileHeader)) {
    add_error(0, "file is " + std::to_string(size_) + " bytes, shorter than the " +
                     std::to_string(sizeof(FileHeader)) + "-byte header (not a moescope trace)");
    return false;
  }
  FileHeader header;
  std::memcpy(&header, data_, sizeof(header));
  if (std::memcmp(header.magic, kFileMagic, sizeof(header.magic)) != 0) {
    add_error(0, "wrong magic: not a moescope trace (expected \"MOETRACE\")");
    return false;
  }
  version_ = header.version;
  if (header.version == 0 || header.version > kFormatVersion) {
    add_error(8, "format version " + std::to_string(header.version) +
                     " is not supported (this build reads versions 1.." +
                     std::to_string(kFormatVersion) + ")");
    return false;
  }
  if (header.metadata_bytes > kMaxMetadataBytes ||
      header.metadata_bytes > size_ - sizeof(FileHeader)) {
    add_error(12, "metadata length " + std::to_string(header.metadata_bytes) +
                      " exceeds the file (" + std::to_string(size_) + " bytes)");
    return false;
  }
  metadata_json_.assign(reinterpret_cast<const char*>(data_ + sizeof(FileHeader)),
                        header.metadata_bytes);
  position_ = sizeof(FileHeader) + header.metadata_bytes;
  chunks_begin_ = position_;
  return true;
}

bool TraceReader::seek_chunk(uint64_t offset) {
  if (chunks_begin_ == 0 || offset < chunks_begin_ || offset > size_) return false;
  position_ = offset;
  return true;
}

bool TraceReader::partial_chunk_at(uint64_t offset) const {
  if (size_ - offset < sizeof(ChunkHeader)) return true;
  ChunkHeader header;
  std::memcpy(&header, data_ + offset, sizeof(header));
  // A writer appends a chunk with one write: a chunk is partial only when nothing follows it.
  // A chunk magic further on means its length is damaged (the reader then resynchronises).
  return header.magic == kChunkMagic && header.payload_bytes <= kMaxChunkBytes &&
         header.payload_bytes > size_ - offset - sizeof(ChunkHeader) &&
         find_next_magic(offset + 1) == size_;
}

uint64_t TraceReader::find_next_magic(uint64_t from) const {
  uint8_t first = kChunkMagic & 0xff;
  for (uint64_t at = from; at + sizeof(uint32_t) <= size_; ++at) {
    const void* hit = std::memchr(data_ + at, first, size_ - at);
    if (!hit) return size_;
    at = static_cast<const uint8_t*>(hit) - data_;
    uint32_t word;
    if (at + sizeof(word) > size_) return size_;
    std::memcpy(&word, data_ + at, sizeof(word));
    if (word == kChunkMagic) return at;
  }
  return size_;
}

bool TraceReader::next_chunk(Chunk& chunk) {
  while (position_ < size_) {
    if (stop_at_partial_ && partial_chunk_at(position_)) return false;
    uint64_t next = size_;
    if (decode_chunk_at(position_, chunk, next)) {
      position_ = next;
      return true;
    }
    position_ = next;
  }
  return false;
}

// Decodes the chunk at `offset`. On success sets next_offset past it. On damage records an
// error and sets next_offset to where reading should resume.
bool TraceReader::decode_chunk_at(uint64_t offset, Chunk& chunk, uint64_t& next_offset) {
  auto resync = [&](std::string message) {
    add_error(offset, std::move(message));
    next_offset = find_next_magic(offset + 1);
    return false;
  };
  if (size_ - offset < sizeof(ChunkHeader)) {
    add_error(offset, "truncated chunk header (" + std::to_string(size_ - offset) +
                          " trailing bytes; the writer stopped mid-chunk)");
    next_offset = size_;
    return false;
  }
  ChunkHeader header;
  std::memcpy(&header, data_ + offset, sizeof(header));
  if (header.magic != kChunkMagic) return resync("bad chunk magic; skipping to the next chunk");
  if (header.payload_bytes > kMaxChunkBytes || header.raw_bytes > kMaxChunkBytes) {
    return resync("absurd chunk length (payload " + std::to_string(header.payload_bytes) +
                  ", raw " + std::to_string(header.raw_bytes) + " bytes)");
  }
  uint64_t payload_offset = offset + sizeof(ChunkHeader);
  if (header.payload_bytes > size_ - payload_offset) {
    return resync("truncated chunk: payload of " + std::to_string(header.payload_bytes) +
                  " bytes but only " + std::to_string(size_ - payload_offset) +
                  " left (the writer stopped mid-chunk)");
  }
  const uint8_t* payload = data_ + payload_offset;
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(&header), offsetof(ChunkHeader, crc32));
  crc = crc32(crc, payload, header.payload_bytes);
  if (static_cast<uint32_t>(crc) != header.crc32) return resync("chunk checksum mismatch");
  // From here the header is trusted: damage inside is skipped by the chunk's own length.
  next_offset = payload_offset + header.payload_bytes;
  if (header.type != static_cast<uint16_t>(ChunkType::kEvents) &&
      header.type != static_cast<uint16_t>(ChunkType::kEnd)) {
    add_error(offset, "unknown chunk type " + std::to_string(header.type) + "; skipped");
    return false;
  }
  // Stage 1: the stored payload -> the row records or the column image (`staged`).
  bool columns = header.flags & kChunkColumns;
  // A column image is at most 4 bytes longer than its records (see column_coding.cpp).
  uint64_t staged_limit = columns ? uint64_t{header.raw_bytes} + 4 : header.raw_bytes;
  std::vector<uint8_t>& staged = columns ? scratch_ : chunk.records;
  if (header.flags & kChunkZstd) {
    unsigned long long content = ZSTD_getFrameContentSize(payload, header.payload_bytes);
    if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
        (columns ? content > staged_limit : content != header.raw_bytes)) {
      add_error(offset, "cannot decompress chunk: zstd frame declares " +
                            (content >= ZSTD_CONTENTSIZE_ERROR ? std::string("no valid size")
                                                               : std::to_string(content)) +
                            " bytes for " + std::to_string(header.raw_bytes) + " raw bytes");
      return false;
    }
    staged.resize(content);
    if (!zstd_context_) zstd_context_ = ZSTD_createDCtx();
    size_t got = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(zstd_context_), staged.data(),
                                     staged.size(), payload, header.payload_bytes);
    if (ZSTD_isError(got) || got != content) {
      add_error(offset, std::string("cannot decompress chunk: ") +
                            (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "size mismatch"));
      return false;
    }
  } else {
    if (columns ? header.payload_bytes > staged_limit : header.payload_bytes != header.raw_bytes) {
      add_error(offset, "uncompressed chunk of " + std::to_string(header.payload_bytes) +
                            " bytes does not match its " + std::to_string(header.raw_bytes) +
                            " raw bytes");
      return false;
    }
    staged.assign(payload, payload + header.payload_bytes);
  }
  // Stage 2: a column image -> records.
  if (columns) {
    chunk.records.resize(header.raw_bytes);
    std::string problem;
    if (!column_decoder_.decode(scratch_.data(), scratch_.size(), chunk.records.data(),
                                chunk.records.size(), problem)) {
      add_error(offset, problem + "; chunk skipped");
      return false;
    }
  }
  // The column decoder has checked every record already (kind, size, tail).
  size_t bad_at = 0;
  std::string problem = columns
                            ? std::string()
                            : validate_records(chunk.records.data(), chunk.records.size(), bad_at);
  if (!problem.empty()) {
    add_error(offset, "invalid record at payload offset " + std::to_string(bad_at) + ": " +
                          problem + "; chunk skipped");
    return false;
  }
  if ((header.flags & kChunkDeltaTime) && !columns)
    delta_decode_times(chunk.records.data(), chunk.records.size());
  chunk.type = static_cast<ChunkType>(header.type);
  chunk.stream = header.stream;
  chunk.file_offset = offset;
  if (chunk.type == ChunkType::kEnd) saw_end_ = true;
  return true;
}

std::string validate_records(const uint8_t* records, size_t bytes, size_t& error_offset) {
  size_t offset = 0;
  while (offset < bytes) {
    error_offset = offset;
    if (bytes - offset < sizeof(RecordHeader)) return "truncated record header";
    RecordHeader header;
    std::memcpy(&header, records + offset, sizeof(header));
    uint32_t fixed = fixed_record_size(header.kind);
    if (fixed == 0) return "unknown record kind " + std::to_string(header.kind);
    if (header.size % 8 != 0 || header.size < fixed) {
      return std::string("bad size ") + std::to_string(header.size) + " for " +
             record_kind_name(header.kind);
    }
    if (header.size > bytes - offset) return "record runs past the chunk end";
    uint64_t tail_needed = declared_tail_bytes(records + offset);
    if (tail_needed > header.size - fixed) {
      return std::string(record_kind_name(header.kind)) + " declares " +
             std::to_string(tail_needed) + " tail bytes but has " +
             std::to_string(header.size - fixed);
    }
    offset += header.size;
  }
  return {};
}

}  // namespace moescope::trace
