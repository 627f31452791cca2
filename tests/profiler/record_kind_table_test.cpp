// The record-kind table (trace_format.h) is what docs/trace-format.md specifies: every kind's
// number, name, fixed size and whether it has a variable tail, row by row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "moescope/trace/record_kinds.h"
#include "moescope/trace/recording_environment.h"
#include "moescope/trace/trace_format.h"
#include "moescope/trace/trigger_reason.h"

namespace moescope::trace {
namespace {

struct DocumentedKind {
  std::string name;
  uint32_t size = 0;
  bool variable = false;
  std::string fields;  // the "fields after the header" cell
};

// "u64 end_time (0 unknown), start_time, u32 kind" -> "u64 end_time, u64 start_time, u32 kind":
// the first `code` span of a fields cell, each field with its type (a field without one has the
// type of the field before it), parentheses dropped. Empty when the cell has no code span.
std::string documented_field_list(const std::string& cell) {
  const size_t open = cell.find('`');
  if (open == std::string::npos) return "";
  const size_t close = cell.find('`', open + 1);
  const std::string code = cell.substr(open + 1, close - open - 1);
  std::vector<std::string> items;
  std::string item;
  int depth = 0;
  for (char c : code) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(item);
      item.clear();
    } else if (depth == 0 && c != ')') {
      item += c;
    }
  }
  items.push_back(item);
  std::string out, type;
  for (const std::string& raw : items) {
    std::istringstream words(raw);
    std::vector<std::string> tokens;
    for (std::string word; words >> word;) tokens.push_back(word);
    if (tokens.empty()) continue;
    if (tokens.size() >= 2) type = tokens[0];
    out += (out.empty() ? "" : ", ") + type + " " + tokens.back();
  }
  return out;
}

// The same list from record_schema.h's declaration of the kind.
std::string declared_field_list(const RecordKindInfo& info) {
  std::string out;
  for (uint16_t i = 0; i < info.num_fields; ++i) {
    const RecordFieldInfo& field = info.fields[i];
    out += (out.empty() ? "" : ", ") + std::string(field.type) + " " + field.name;
    if (field.count != 1) out += "[" + std::to_string(field.count) + "]";
  }
  return out;
}

// Rows "| 14 | comm_op | 104 + 8n | ..." of the records table.
std::map<int, DocumentedKind> documented_kinds() {
  const char* source = std::getenv("MOESCOPE_SOURCE_DIR");
  EXPECT_NE(source, nullptr) << "MOESCOPE_SOURCE_DIR is set by CTest";
  std::ifstream in(std::string(source ? source : ".") + "/docs/trace-format.md");
  EXPECT_TRUE(in) << "cannot read docs/trace-format.md";
  const std::regex row(R"(^\| (\d+) \| ([a-z_]+) \| (\d+)( \+ \d*n)? \| ([^|]*) \|)");
  std::map<int, DocumentedKind> kinds;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch match;
    if (!std::regex_search(line, match, row)) continue;
    kinds[std::stoi(match[1])] = {match[2], static_cast<uint32_t>(std::stoul(match[3])),
                                  match[4].matched, match[5]};
  }
  return kinds;
}

TEST(RecordKindTable, MatchesTheSpecification) {
  const std::map<int, DocumentedKind> documented = documented_kinds();
  ASSERT_EQ(documented.size(), size_t{kMaxRecordKind});
  for (const RecordKindInfo& info : kRecordKinds) {
    const int kind = static_cast<int>(info.kind);
    auto found = documented.find(kind);
    ASSERT_NE(found, documented.end()) << "kind " << kind << " is not documented";
    EXPECT_EQ(found->second.name, info.name) << "kind " << kind;
    EXPECT_EQ(found->second.size, info.fixed_size) << info.name;
    EXPECT_EQ(found->second.variable, has_variable_tail(static_cast<uint8_t>(kind))) << info.name;
    EXPECT_STREQ(record_kind_name(static_cast<uint8_t>(kind)), info.name);
    EXPECT_NE(std::string(info.description), "") << info.name;
    // Every field the schema declares, in order, with its type and array extent.
    EXPECT_EQ(documented_field_list(found->second.fields), declared_field_list(info)) << info.name;
  }
  EXPECT_STREQ(record_kind_name(0), "unknown");
  EXPECT_STREQ(record_kind_name(kMaxRecordKind + 1), "unknown");
  EXPECT_EQ(fixed_record_size(kMaxRecordKind + 1), 0u);
}

// The trigger record's reason codes are those the specification lists ("... reason: 1 signal
// (...), 2 hang (...), ..., 6 collective timeout (...)"), named by trace/trigger_reason.h.
TEST(RecordKindTable, TriggerReasonsAreTheSpecifications) {
  const char* source = std::getenv("MOESCOPE_SOURCE_DIR");
  std::ifstream in(std::string(source ? source : ".") + "/docs/trace-format.md");
  std::string line, reasons;
  while (std::getline(in, line)) {
    if (line.find("| reason: 1 signal") != std::string::npos) reasons = line;
  }
  ASSERT_FALSE(reasons.empty()) << "no trigger reason row in docs/trace-format.md";
  uint32_t code = 1;
  for (; std::string(trigger_reason_name(code)) != "unknown"; ++code) {
    std::string words = trigger_reason_name(code);
    std::replace(words.begin(), words.end(), '_', ' ');
    const std::string documented = std::to_string(code) + " " + words + " (";
    EXPECT_NE(reasons.find(documented), std::string::npos) << documented << "\n" << reasons;
  }
  EXPECT_EQ(code, 9u) << "the codes 1-8 are named, and no more";
  EXPECT_EQ(reasons.find(std::to_string(code) + " "), std::string::npos)
      << "the specification lists a reason the code does not name";
  EXPECT_STREQ(trigger_reason_name(0), "unknown");
}

// The tail a record declares is its count field times the element size of its row.
TEST(RecordKindTable, DeclaredTailFollowsTheCountField) {
  alignas(8) uint8_t record[sizeof(CommOpRecord)] = {};
  auto* op = reinterpret_cast<CommOpRecord*>(record);
  op->header.kind = static_cast<uint8_t>(RecordKind::kCommOp);
  op->num_splits = 3;
  EXPECT_EQ(declared_tail_bytes(record), 24u);
  auto* load = reinterpret_cast<ExpertLoadRecord*>(record);
  load->header.kind = static_cast<uint8_t>(RecordKind::kExpertLoad);
  load->num_experts = 5;
  EXPECT_EQ(declared_tail_bytes(record), 20u);
  auto* text = reinterpret_cast<StringRecord*>(record);
  text->header.kind = static_cast<uint8_t>(RecordKind::kString);
  text->length = 11;
  EXPECT_EQ(declared_tail_bytes(record), 11u);
  record[0] = static_cast<uint8_t>(RecordKind::kCounter);
  EXPECT_EQ(declared_tail_bytes(record), 0u);
}

// The recording's environment variables (recording_environment.h) are the ones
// docs/capture.md's Environment table lists, no more and no fewer.
TEST(RecordingEnvironment, EveryVariableIsDocumented) {
  const char* source = std::getenv("MOESCOPE_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "MOESCOPE_SOURCE_DIR is set by CTest";
  std::ifstream in(std::string(source) + "/docs/capture.md");
  ASSERT_TRUE(in) << "cannot read docs/capture.md";
  std::set<std::string> documented;
  const std::regex name(R"(`(MOESCOPE_[A-Z0-9_]+)`)");
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### ", 0) == 0) in_section = line == "### Environment";
    // The first cell of a table row: the variables it is about.
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(0, line.find(" | ", 2));
    for (std::sregex_iterator it(cell.begin(), cell.end(), name), end; it != end; ++it) {
      documented.insert((*it)[1]);
    }
  }
  std::set<std::string> declared;
  for (const environment::Variable& variable : environment::kVariables) {
    EXPECT_TRUE(declared.insert(variable.name).second) << variable.name << " declared twice";
    EXPECT_NE(std::string(variable.meaning), "") << variable.name;
  }
  for (const std::string& variable : declared) {
    EXPECT_TRUE(documented.count(variable)) << variable << " is not in docs/capture.md";
  }
  for (const std::string& variable : documented) {
    EXPECT_TRUE(declared.count(variable)) << variable << " is documented but not declared";
  }
  EXPECT_EQ(std::string(environment::kOutput), "MOESCOPE_OUTPUT");
}

}  // namespace
}  // namespace moescope::trace
