// Damaged traces: a clear error naming file and offset, every intact chunk still read, no crash.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <random>

#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace moescope::trace {
namespace {

constexpr int kChunks = 8;
constexpr int kStepsPerChunk = 200;

// A trace image of kChunks chunks, each holding kStepsPerChunk step records; also returns
// where each chunk starts.
std::vector<uint8_t> make_image(std::vector<uint64_t>& chunk_offsets, bool compress = true) {
  // Per process: CTest runs tests of this binary in parallel.
  std::string path =
      ::testing::TempDir() + "/damage_source_" + std::to_string(getpid()) + ".moetrace";
  {
    TraceWriter writer;
    WriterOptions options;
    options.compress = compress;
    EXPECT_TRUE(writer.open(path, R"({"rank":0})", options));
    for (int c = 0; c < kChunks; ++c) {
      chunk_offsets.push_back(writer.bytes_written());
      RecordBuffer buffer;
      for (int i = 0; i < kStepsPerChunk; ++i) {
        buffer.append<StepRecord>(RecordKind::kStep, 100 * i).step = c * kStepsPerChunk + i;
      }
      EXPECT_TRUE(writer.write_chunk(1, buffer.bytes()));
    }
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)), {});
  std::remove(path.c_str());
  return image;
}

struct ReadResult {
  bool opened = false;
  std::vector<int> chunk_first_steps;  // first step of every chunk decoded
  std::vector<ReadError> errors;
};

ReadResult read_image(const std::vector<uint8_t>& image) {
  ReadResult result;
  TraceReader reader;
  result.opened = reader.open_memory(image.data(), image.size(), "damaged.moetrace");
  Chunk chunk;
  while (result.opened && reader.next_chunk(chunk)) {
    int expected = -1;
    for (RecordView record : chunk) {
      auto step = record.as<StepRecord>();
      if (expected < 0) {
        expected = static_cast<int>(step.step);
        result.chunk_first_steps.push_back(expected);
      }
      EXPECT_EQ(step.step, expected++);  // a decoded chunk is always wholly intact
    }
  }
  result.errors = reader.errors();
  return result;
}

TEST(Damage, TruncationAtAnyLengthKeepsEveryCompleteChunk) {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> image = make_image(offsets);
  offsets.push_back(image.size());
  for (size_t cut = offsets[0]; cut < image.size(); cut += 7) {
    std::vector<uint8_t> truncated(image.begin(), image.begin() + cut);
    ReadResult result = read_image(truncated);
    ASSERT_TRUE(result.opened);
    int complete = 0;
    while (complete < kChunks && offsets[complete + 1] <= cut) ++complete;
    ASSERT_EQ(static_cast<int>(result.chunk_first_steps.size()), complete) << "cut at " << cut;
    bool cut_inside_chunk = cut != offsets[complete];
    ASSERT_EQ(result.errors.empty(), !cut_inside_chunk) << "cut at " << cut;
    if (cut_inside_chunk) {
      EXPECT_EQ(result.errors[0].offset, offsets[complete]);
      EXPECT_EQ(result.errors[0].file, "damaged.moetrace");
      EXPECT_NE(result.errors[0].to_string().find("damaged.moetrace:"), std::string::npos);
    }
  }
}

TEST(Damage, FlippedBytesLoseOnlyTheChunksTheyHit) {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> image = make_image(offsets);
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> damaged = image;
    size_t at = offsets[0] + rng() % (image.size() - offsets[0]);
    damaged[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    int hit = 0;
    while (hit + 1 < kChunks && offsets[hit + 1] <= at) ++hit;
    ReadResult result = read_image(damaged);
    ASSERT_TRUE(result.opened);
    ASSERT_EQ(static_cast<int>(result.chunk_first_steps.size()), kChunks - 1) << "flip at " << at;
    for (int first : result.chunk_first_steps) EXPECT_NE(first, hit * kStepsPerChunk);
    ASSERT_FALSE(result.errors.empty());
    EXPECT_EQ(result.errors[0].offset, offsets[hit]);
  }
}

TEST(Damage, WrongMagicIsRejectedClearly) {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> image = make_image(offsets);
  image[0] = 'X';
  ReadResult result = read_image(image);
  EXPECT_FALSE(result.opened);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].offset, 0u);
  EXPECT_NE(result.errors[0].message.find("wrong magic"), std::string::npos);
}

TEST(Damage, FutureVersionIsRejectedClearly) {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> image = make_image(offsets);
  uint32_t version = kFormatVersion + 1;
  std::memcpy(image.data() + 8, &version, 4);
  ReadResult result = read_image(image);
  EXPECT_FALSE(result.opened);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].offset, 8u);
  EXPECT_NE(result.errors[0].message.find("version " + std::to_string(kFormatVersion + 1) +
                                          " is not supported"),
            std::string::npos);
}

TEST(Damage, AbsurdLengthsAreCaughtBeforeUse) {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> image = make_image(offsets);
  std::vector<uint8_t> bad_metadata = image;
  uint32_t huge = 0xFFFFFF00u;
  std::memcpy(bad_metadata.data() + 12, &huge, 4);
  ReadResult metadata_result = read_image(bad_metadata);
  EXPECT_FALSE(metadata_result.opened);
  EXPECT_NE(metadata_result.errors.at(0).message.find("metadata length"), std::string::npos);

  std::vector<uint8_t> bad_chunk = image;
  std::memcpy(bad_chunk.data() + offsets[2] + offsetof(ChunkHeader, payload_bytes), &huge, 4);
  ReadResult chunk_result = read_image(bad_chunk);
  ASSERT_TRUE(chunk_result.opened);
  EXPECT_EQ(chunk_result.chunk_first_steps.size(), size_t{kChunks - 1});
  ASSERT_FALSE(chunk_result.errors.empty());
  EXPECT_EQ(chunk_result.errors[0].offset, offsets[2]);
  EXPECT_NE(chunk_result.errors[0].message.find("absurd chunk length"), std::string::npos);
}

TEST(Damage, InvalidRecordsInsideAValidChunkAreReported) {
  // A chunk whose checksum is right but whose records lie: the record layer catches it.
  std::string path =
      ::testing::TempDir() + "/bad_records_" + std::to_string(getpid()) + ".moetrace";
  {
    TraceWriter writer;
    ASSERT_TRUE(writer.open(path, "{}"));
    RecordBuffer good;
    good.append<StepRecord>(RecordKind::kStep, 1).step = 1;
    ASSERT_TRUE(writer.write_chunk(1, good.bytes()));
    RecordBuffer lying;
    auto& load = lying.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad, 2, 0, 8);
    load.num_experts = 1000000;  // claims far more counts than it carries
    ASSERT_TRUE(writer.write_chunk(1, lying.bytes()));
    RecordBuffer unknown;
    unknown.append<StepRecord>(RecordKind::kStep, 3);
    unknown.bytes()[0] = 200;  // unknown kind
    ASSERT_TRUE(writer.write_chunk(1, unknown.bytes()));
    ASSERT_TRUE(writer.write_chunk(1, good.bytes()));
  }
  TraceReader reader;
  ASSERT_TRUE(reader.open(path));
  Chunk chunk;
  int decoded = 0;
  while (reader.next_chunk(chunk)) ++decoded;
  EXPECT_EQ(decoded, 2);
  ASSERT_EQ(reader.errors().size(), 2u);
  EXPECT_NE(reader.errors()[0].message.find("expert_load declares"), std::string::npos);
  EXPECT_NE(reader.errors()[1].message.find("unknown record kind 200"), std::string::npos);
  EXPECT_NE(reader.errors()[1].to_string().find(path + ":"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Damage, MissingAndEmptyFilesAreClearErrors) {
  TraceReader missing;
  EXPECT_FALSE(missing.open("/nonexistent/trace.moetrace"));
  EXPECT_NE(missing.errors().at(0).to_string().find("/nonexistent/trace.moetrace:0: cannot open"),
            std::string::npos);
  std::vector<uint8_t> empty;
  ReadResult result = read_image(empty);
  EXPECT_FALSE(result.opened);
  EXPECT_NE(result.errors.at(0).message.find("shorter than"), std::string::npos);
}

}  // namespace
}  // namespace moescope::trace
