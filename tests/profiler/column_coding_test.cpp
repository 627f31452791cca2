// Column-coded chunks (format version 2): exact round trips of arbitrary records, the writer's
// fallback to rows, damaged column images rejected with a clear error, version-1 files read.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <random>

#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace moescope::trace {
namespace {

std::string temp_file(const std::string& name) {
  // Per process: CTest runs the tests of this binary in parallel.
  return ::testing::TempDir() + "/columns_" + name + "_" + std::to_string(getpid()) + ".moetrace";
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

// `count` records of random kinds whose every byte after the header is random, some with
// extra bytes past the kind's fixed size, times mostly rising with a few jumps back.
std::vector<uint8_t> random_records(std::mt19937_64& rng, int count) {
  std::vector<uint8_t> bytes;
  uint64_t time = rng();
  for (int i = 0; i < count; ++i) {
    auto kind = static_cast<uint8_t>(1 + rng() % kMaxRecordKind);
    uint32_t size = fixed_record_size(kind);
    if (rng() % 8 == 0) size += 8 * static_cast<uint32_t>(rng() % 20);
    size_t at = bytes.size();
    bytes.resize(at + size);
    for (uint32_t b = sizeof(RecordHeader); b < size; ++b)
      bytes[at + b] = static_cast<uint8_t>(rng());
    time = rng() % 16 == 0 ? rng() : time + rng() % 5000;
    RecordHeader header{kind, 0, static_cast<uint16_t>(size), static_cast<uint32_t>(rng() % 40),
                        time};
    std::memcpy(bytes.data() + at, &header, sizeof(header));
    // Variable-length kinds declare what their tail holds (the reader checks it).
    uint32_t tail = size - fixed_record_size(kind);
    auto declare = [&](size_t offset, uint32_t value) {
      std::memcpy(bytes.data() + at + offset, &value, sizeof(value));
    };
    switch (static_cast<RecordKind>(kind)) {
      case RecordKind::kString:
        declare(offsetof(StringRecord, length), tail);
        break;
      case RecordKind::kExpertLoad:
        declare(offsetof(ExpertLoadRecord, num_experts), tail / 4);
        break;
      case RecordKind::kExpertValues:
        declare(offsetof(ExpertValuesRecord, num_experts), tail / 4);
        break;
      case RecordKind::kCommOp:
        declare(offsetof(CommOpRecord, num_splits), tail / 8);
        break;
      case RecordKind::kRebalance:
        declare(offsetof(RebalanceRecord, num_costs), tail / sizeof(RebalanceCosts));
        break;
      default:
        break;
    }
  }
  return bytes;
}

// A GPU stream as CUPTI reports it: a few kernels repeating with the same launch settings.
std::vector<uint8_t> kernel_stream(int count) {
  RecordBuffer buffer;
  uint64_t time = 1'000'000'000;
  for (int i = 0; i < count; ++i) {
    auto& kernel = buffer.append<GpuKernelRecord>(RecordKind::kGpuKernel, time, 10 + i % 8);
    kernel.end_time = time + 3000 + 100 * (i % 8) + i % 7;
    kernel.correlation_id = 100 + 2 * i;
    kernel.device = 1;
    kernel.stream = 7;
    kernel.grid[0] = 132 * (1 + i % 2);
    kernel.grid[1] = kernel.grid[2] = 1;
    kernel.block[0] = 256;
    kernel.block[1] = kernel.block[2] = 1;
    kernel.registers_per_thread = 64;
    time += 4000 + 100 * (i % 8) + i % 13;
  }
  return buffer.bytes();
}

// Flags of the first chunk of a file written by TraceWriter.
uint16_t first_chunk_flags(const std::vector<uint8_t>& file) {
  FileHeader header;
  std::memcpy(&header, file.data(), sizeof(header));
  uint16_t flags;
  std::memcpy(&flags, file.data() + sizeof(header) + header.metadata_bytes + 6, sizeof(flags));
  return flags;
}

std::vector<uint8_t> write_and_read_back(const std::vector<uint8_t>& records, WriterOptions options,
                                         std::vector<uint8_t>* file) {
  std::string path = temp_file("roundtrip");
  {
    TraceWriter writer;
    EXPECT_TRUE(writer.open(path, "{}", options)) << writer.error();
    std::vector<uint8_t> copy = records;
    EXPECT_TRUE(writer.write_chunk(2, copy));
  }
  if (file) *file = file_bytes(path);
  TraceReader reader;
  EXPECT_TRUE(reader.open(path));
  Chunk chunk;
  EXPECT_TRUE(reader.next_chunk(chunk));
  EXPECT_TRUE(reader.errors().empty()) << reader.errors()[0].to_string();
  std::remove(path.c_str());
  return chunk.records;
}

TEST(ColumnCoding, ArbitraryRecordsOfEveryKindRoundTripExactly) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint8_t> records = random_records(rng, 20000);
  ColumnEncoder encoder;
  ColumnDecoder decoder;
  std::vector<uint8_t> image;
  ASSERT_TRUE(encoder.encode(records.data(), records.size(), image));
  std::vector<uint8_t> decoded(records.size());
  std::string error;
  ASSERT_TRUE(decoder.decode(image.data(), image.size(), decoded.data(), decoded.size(), error))
      << error;
  EXPECT_EQ(decoded, records);
  // The same coder objects serve a second, smaller chunk (scratch memory reused).
  records.resize(0);
  records = random_records(rng, 50);
  ASSERT_TRUE(encoder.encode(records.data(), records.size(), image));
  decoded.assign(records.size(), 0);
  ASSERT_TRUE(decoder.decode(image.data(), image.size(), decoded.data(), decoded.size(), error));
  EXPECT_EQ(decoded, records);
  // An empty chunk is a valid image too.
  ASSERT_TRUE(encoder.encode(nullptr, 0, image));
  EXPECT_TRUE(decoder.decode(image.data(), image.size(), nullptr, 0, error)) << error;
}

TEST(ColumnCoding, WriterStoresColumnsAndTheyAreSmallerThanRows) {
  std::vector<uint8_t> records = kernel_stream(20000);
  std::vector<uint8_t> column_file, row_file;
  WriterOptions rows;
  rows.columns = false;
  EXPECT_EQ(write_and_read_back(records, {}, &column_file), records);
  EXPECT_EQ(write_and_read_back(records, rows, &row_file), records);
  EXPECT_EQ(first_chunk_flags(column_file), kChunkColumns | kChunkZstd);
  EXPECT_EQ(first_chunk_flags(row_file), kChunkDeltaTime | kChunkZstd);
  EXPECT_LT(column_file.size(), row_file.size());
  EXPECT_LT(column_file.size(), 20000u * 8);  // under 8 bytes per kernel, as the format promises
}

TEST(ColumnCoding, RecordsColumnsCannotHoldFallBackToRows) {
  std::mt19937_64 rng(7);
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<uint8_t> records = random_records(rng, 100);
    uint8_t* victim = records.data();                      // the first record
    if (variant == 0) victim[1] = kRecordRawTicks;         // flags set
    if (variant == 1) victim[0] = 200;                     // unknown kind
    if (variant == 2) records.resize(records.size() - 4);  // a torn last record
    ColumnEncoder encoder;
    std::vector<uint8_t> image;
    EXPECT_FALSE(encoder.encode(records.data(), records.size(), image)) << variant;
    std::vector<uint8_t> file;
    std::string path = temp_file("fallback");
    {
      TraceWriter writer;
      ASSERT_TRUE(writer.open(path, "{}"));
      std::vector<uint8_t> copy = records;
      ASSERT_TRUE(writer.write_chunk(1, copy));
    }
    file = file_bytes(path);
    std::remove(path.c_str());
    EXPECT_EQ(first_chunk_flags(file) & kChunkColumns, 0) << variant;
  }
}

// Every way a column image can lie about itself is an error, never a crash (the sanitizer
// stage runs this too); a few cases check the message.
TEST(ColumnCoding, DamagedImagesAreRejectedWithAReason) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> records = random_records(rng, 300);
  ColumnEncoder encoder;
  ColumnDecoder decoder;
  std::vector<uint8_t> image;
  ASSERT_TRUE(encoder.encode(records.data(), records.size(), image));
  std::vector<uint8_t> out(records.size());
  std::string error;

  std::vector<uint8_t> bad = image;
  bad[4] = 0;  // the first kind byte
  EXPECT_FALSE(decoder.decode(bad.data(), bad.size(), out.data(), out.size(), error));
  EXPECT_NE(error.find("unknown record kind 0"), std::string::npos) << error;

  bad = image;
  uint32_t huge = 1u << 30;
  std::memcpy(bad.data(), &huge, 4);
  EXPECT_FALSE(decoder.decode(bad.data(), bad.size(), out.data(), out.size(), error));
  EXPECT_NE(error.find("declares 1073741824 records"), std::string::npos) << error;

  EXPECT_FALSE(decoder.decode(image.data(), image.size() - 1, out.data(), out.size(), error));
  EXPECT_NE(error.find("column image is"), std::string::npos) << error;
  EXPECT_FALSE(decoder.decode(image.data(), image.size(), out.data(), out.size() - 8, error));
  EXPECT_FALSE(decoder.decode(image.data(), 3, out.data(), out.size(), error));

  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    bad = image;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    std::vector<uint8_t> exact(bad.begin(), bad.end());  // so the sanitizer sees any overread
    if (decoder.decode(exact.data(), exact.size(), out.data(), out.size(), error)) ++accepted;
  }
  // Edits inside the columns decode to other values (the CRC catches those on disk); edits of
  // the kinds, sizes or lengths are refused.
  EXPECT_LT(accepted, 3000);
}

// A column chunk whose image is damaged (with a CRC that matches, as a writer bug would
// produce) is reported with file and offset; the chunks around it are still read.
TEST(ColumnCoding, ReaderSkipsAChunkWithADamagedImage) {
  std::string path = temp_file("damaged");
  std::vector<uint64_t> offsets;
  {
    TraceWriter writer;
    WriterOptions options;
    options.compress = false;  // the image is stored as is, so it can be edited here
    ASSERT_TRUE(writer.open(path, "{}", options));
    for (int c = 0; c < 3; ++c) {
      offsets.push_back(writer.bytes_written());
      std::vector<uint8_t> records = kernel_stream(100);
      ASSERT_TRUE(writer.write_chunk(1, records));
    }
  }
  std::vector<uint8_t> file = file_bytes(path);
  std::remove(path.c_str());
  uint64_t middle = offsets[1];
  file[middle + sizeof(ChunkHeader) + 4] = 99;  // first kind byte of the middle chunk
  uint32_t payload_bytes;
  std::memcpy(&payload_bytes, file.data() + middle + 12, 4);
  uLong crc = crc32(0L, file.data() + middle, offsetof(ChunkHeader, crc32));
  crc = crc32(crc, file.data() + middle + sizeof(ChunkHeader), payload_bytes);
  uint32_t stored = static_cast<uint32_t>(crc);
  std::memcpy(file.data() + middle + offsetof(ChunkHeader, crc32), &stored, 4);

  TraceReader reader;
  ASSERT_TRUE(reader.open_memory(file.data(), file.size(), "damaged.moetrace"));
  Chunk chunk;
  std::vector<uint8_t> expected = kernel_stream(100);
  int chunks = 0;
  while (reader.next_chunk(chunk)) {
    EXPECT_EQ(chunk.records, expected);
    ++chunks;
  }
  EXPECT_EQ(chunks, 2);
  ASSERT_EQ(reader.errors().size(), 1u);
  EXPECT_EQ(reader.errors()[0].offset, middle);
  EXPECT_EQ(reader.errors()[0].to_string().rfind("damaged.moetrace:" + std::to_string(middle) +
                                                     ": column image: unknown record kind 99",
                                                 0),
            0u)
      << reader.errors()[0].to_string();
}

TEST(ColumnCoding, VersionOneFilesStayReadable) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> records = random_records(rng, 2000);
  WriterOptions version1;  // what version-1 writers stored: rows, delta-coded times, zstd
  version1.columns = false;
  version1.zstd_level = -1;
  std::vector<uint8_t> file;
  write_and_read_back(records, version1, &file);
  uint32_t one = 1;
  std::memcpy(file.data() + 8, &one, 4);
  TraceReader reader;
  ASSERT_TRUE(reader.open_memory(file.data(), file.size(), "v1.moetrace"));
  EXPECT_EQ(reader.version(), 1u);
  Chunk chunk;
  ASSERT_TRUE(reader.next_chunk(chunk));
  EXPECT_EQ(chunk.records, records);
  EXPECT_TRUE(reader.errors().empty());
}

}  // namespace
}  // namespace moescope::trace
