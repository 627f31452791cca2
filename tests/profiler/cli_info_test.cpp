// `moescope info` on real traces: text and JSON, and damaged input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moescope/trace/trace_writer.h"
#include "trace_test_reading.h"

namespace moescope {
namespace {

struct CommandResult {
  int exit_code;
  std::string out;
};

CommandResult run(const std::string& command) {
  CommandResult result{-1, ""};
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, got);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string moescope_binary() {
  const char* dir = std::getenv("MOESCOPE_BUILD_DIR");
  return std::string(dir ? dir : "build") + "/bin/moescope";
}

std::string write_sample(const std::string& name) {
  std::string path = testing::temp_path(name);
  trace::TraceWriter writer;
  EXPECT_TRUE(writer.open(path, R"({"rank":1,"world_size":2,"host":"h","pid":7})"));
  trace::RecordBuffer buffer;
  buffer.define_string(1, "step");
  for (int i = 0; i < 10; ++i) {
    buffer.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 1000 + i * 100, 1);
    buffer.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 1050 + i * 100);
  }
  auto& kernel = buffer.append<trace::GpuKernelRecord>(trace::RecordKind::kGpuKernel, 5000, 1);
  kernel.end_time = 9000;
  EXPECT_TRUE(writer.write_chunk(1, buffer.bytes()));
  trace::RecordBuffer end;
  end.append<trace::StatsRecord>(trace::RecordKind::kStats, 9000);
  EXPECT_TRUE(writer.write_chunk(0, end.bytes(), trace::ChunkType::kEnd));
  return path;
}

TEST(CliInfo, JsonCountsEventsPerKindAndTimeSpan) {
  std::string path = write_sample("info.moetrace");
  auto result = run(moescope_binary() + " info --json " + path);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  auto json = nlohmann::json::parse(result.out);
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json[0]["events"], 21);
  EXPECT_EQ(json[0]["events_per_kind"]["span_begin"], 10);
  EXPECT_EQ(json[0]["events_per_kind"]["span_end"], 10);
  EXPECT_EQ(json[0]["events_per_kind"]["gpu_kernel"], 1);
  EXPECT_EQ(json[0]["duration_ns"], 8000);
  EXPECT_EQ(json[0]["metadata"]["rank"], 1);
  EXPECT_EQ(json[0]["complete"], true);
  auto text = run(moescope_binary() + " info " + path);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("rank 1 of 2"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("span_begin"), std::string::npos);
  std::remove(path.c_str());
}

TEST(CliInfo, DamagedTraceShowsWhatIsReadableAndWhere) {
  std::string path = write_sample("info_cut.moetrace");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 10);
  auto result = run(moescope_binary() + " info --json " + path);
  ASSERT_EQ(result.exit_code, 0);
  auto json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json[0]["events"], 21);  // the event chunk is intact, the end chunk is cut
  EXPECT_EQ(json[0]["complete"], false);
  ASSERT_EQ(json[0]["errors"].size(), 1u);
  EXPECT_NE(json[0]["errors"][0]["message"].get<std::string>().find("truncated"),
            std::string::npos);

  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a trace at all";
  auto garbage = run(moescope_binary() + " info " + path);
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_NE(garbage.out.find("wrong magic"), std::string::npos) << garbage.out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moescope
