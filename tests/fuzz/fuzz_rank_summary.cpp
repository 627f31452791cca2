// libFuzzer target: any bytes given as a rank summary (rank_summary.h) must be refused with a
// message or read, never crash; what reads is followed through the summary path of the report
// (load_rank_summaries -> build_report -> every format). The first input byte chooses whether
// the header's size and checksum are recomputed around the rest, so the fuzzer reaches the
// section decoder and the consistency checks instead of stopping at the checksum.
//
// With MOESCOPE_FUZZ_SUMMARY_SEEDS=DIR set, writes valid summaries of small traces into DIR
// first (the corpus then starts from real structure).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_pipeline.h"
#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/summary_load.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/trace_writer.h"

namespace {

using namespace moescope;

constexpr size_t kHeaderBytes = 32;

std::string with_header(const std::string& payload) {
  std::string out("moesumm\n", 8);
  const uint32_t version = analysis::kRankSummaryVersion, reserved = 0;
  const uint64_t size = payload.size();
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : payload) hash = (hash ^ c) * 0x100000001b3ull;
  out.append(reinterpret_cast<const char*>(&version), 4);
  out.append(reinterpret_cast<const char*>(&reserved), 4);
  out.append(reinterpret_cast<const char*>(&size), 8);
  out.append(reinterpret_cast<const char*>(&hash), 8);
  return out + payload;
}

void write_seeds(const std::string& dir) {
  for (int variant = 0; variant < 3; ++variant) {
    const std::string trace = fuzz::scratch_path(".moetrace");
    trace::TraceWriter writer;
    if (!writer.open(trace,
                     R"({"rank":)" + std::to_string(variant) + R"(,"host":"h","run_id":"r"})")) {
      return;
    }
    trace::RecordBuffer buffer;
    buffer.define_string(1, "step");
    buffer.define_string(2, "expert_gemm");
    for (int step = 0; step < 3; ++step) {
      const uint64_t t = 1000 + uint64_t(step) * 1000;
      buffer.append<trace::StepRecord>(trace::RecordKind::kStep, t).step = step;
      auto& kernel =
          buffer.append<trace::GpuKernelRecord>(trace::RecordKind::kGpuKernel, t + 10, 2);
      kernel.end_time = t + 400;
      auto& comm =
          buffer.append_sized<trace::CommOpRecord>(trace::RecordKind::kCommOp, t + 500, 1, 16);
      comm.start_time = t + 500;
      comm.end_time = t + 900;
      comm.kind = 6;
      comm.num_ranks = 2;
      comm.rank = variant % 2;
      comm.sequence = uint32_t(step);
      comm.num_splits = 2;
      auto& load = buffer.append_sized<trace::ExpertLoadRecord>(trace::RecordKind::kExpertLoad,
                                                                t + 20, 0, 8);
      load.step = step;
      load.num_experts = 2;
      auto& alloc = buffer.append<trace::MemoryRecord>(trace::RecordKind::kMemory, t + 30);
      alloc.address = 64;
      alloc.bytes = 1024;
    }
    writer.write_chunk(1, buffer.bytes());
    trace::RecordBuffer end;
    end.append<trace::StatsRecord>(trace::RecordKind::kStats, 9000);
    writer.write_chunk(0, end.bytes(), trace::ChunkType::kEnd);
    writer.close();
    analysis::TraceModel model = analysis::load_traces({trace});
    if (model.processes.size() == 1) {
      const std::string bytes =
          analysis::encode_rank_summary(analysis::summarize_process(model, 0, 1), false);
      // The seed as this target reads it: the "recompute the header" byte, then the payload.
      const std::string seed = std::string(1, '\1') + bytes.substr(kHeaderBytes);
      fuzz::write_file(dir + "/seed" + std::to_string(variant), seed.data(), seed.size());
    }
    std::remove(trace.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MOESCOPE_FUZZ_SUMMARY_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string bytes = (data[0] & 1) ? with_header(rest) : rest;
  analysis::RankSummary summary;
  std::string error;
  if (!analysis::decode_rank_summary(bytes, summary, error)) {
    if (error.empty()) abort();  // a refusal always says why
    return 0;
  }
  // Read: the whole summary path on it, as `moescope report` would run it.
  const std::string path = fuzz::scratch_path(".moesummary");
  if (!fuzz::write_file(path, bytes.data(), bytes.size())) return 0;
  analysis::SummaryLoad loaded = analysis::load_rank_summaries({path});
  if (loaded.refused.empty() && !loaded.needs_traces && !loaded.model.processes.empty()) {
    const analysis::Report report = analysis::build_report(loaded.model, loaded.facts);
    for (auto format : {analysis::ReportFormat::kText, analysis::ReportFormat::kJson}) {
      if (analysis::render_report(loaded.model, report, format).empty()) abort();
    }
  }
  std::remove(path.c_str());
  return 0;
}
