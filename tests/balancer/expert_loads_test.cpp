// Reading expert loads from JSON and CSV, and the errors for malformed files.
#include "moescope/balancer/expert_loads.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

namespace moescope::balancer {
namespace {

void expect_parse_error(const std::function<void()>& parse, const std::string& expected_text) {
  try {
    parse();
    ADD_FAILURE() << "no error; expected one mentioning '" << expected_text << "'";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(expected_text), std::string::npos)
        << "message: " << error.what();
  }
}

TEST(ExpertLoadsJson, ReadsLayersObjectAndFlatForms) {
  const ExpertLoads nested = parse_expert_loads_json("[[1, 2.5, 3], [4, 5, 6e2]]", "x.json");
  EXPECT_EQ(nested.num_layers, 2);
  EXPECT_EQ(nested.num_experts, 3);
  EXPECT_EQ(nested.values, (std::vector<double>{1, 2.5, 3, 4, 5, 600}));
  EXPECT_EQ(nested.layer(1)[2], 600.0);

  const ExpertLoads object = parse_expert_loads_json(R"({"loads": [[7, 8]], "note": 1})", "o");
  EXPECT_EQ(object.num_layers, 1);
  EXPECT_EQ(object.values, (std::vector<double>{7, 8}));

  const ExpertLoads flat = parse_expert_loads_json("[0, 9, 1]", "f");
  EXPECT_EQ(flat.num_layers, 1);
  EXPECT_EQ(flat.num_experts, 3);
}

TEST(ExpertLoadsJson, RejectsMalformedLoadsNamingWhere) {
  expect_parse_error([] { parse_expert_loads_json("[[1, 2], [3]]", "a.json"); },
                     "a.json: layer 1 has 1 experts, layer 0 has 2");
  expect_parse_error([] { parse_expert_loads_json("[[1, \"x\"]]", "a.json"); },
                     "layer 0 expert 1 is string, not a number");
  expect_parse_error([] { parse_expert_loads_json("[[1, -4]]", "a.json"); },
                     "at layer 0 expert 1 must be finite and non-negative");
  expect_parse_error([] { parse_expert_loads_json("[[1, 2]", "bad.json"); },
                     "bad.json: invalid JSON");
  expect_parse_error([] { parse_expert_loads_json("{\"load\": []}", "k.json"); }, "\"loads\"");
  expect_parse_error([] { parse_expert_loads_json("[]", "e.json"); }, "non-empty array");
  expect_parse_error([] { parse_expert_loads_json("[[]]", "e.json"); }, "layer 0 has no experts");
  expect_parse_error([] { parse_expert_loads_json("[[1], 2]", "m.json"); },
                     "layer 1 is not an array");
}

TEST(ExpertLoadsCsv, ReadsRowsSkippingHeaderCommentsAndBlankLines) {
  const ExpertLoads loads = parse_expert_loads_csv(
      "# per-layer tokens\nexpert0,expert1,expert2\n1, 2 ,3\n\n4,5,6,\r\n", "l.csv");
  EXPECT_EQ(loads.num_layers, 2);
  EXPECT_EQ(loads.num_experts, 3);
  EXPECT_EQ(loads.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  const ExpertLoads no_newline = parse_expert_loads_csv("0.5,1e3", "n.csv");
  EXPECT_EQ(no_newline.values, (std::vector<double>{0.5, 1000}));
}

TEST(ExpertLoadsCsv, RejectsMalformedRowsNamingLineAndColumn) {
  expect_parse_error([] { parse_expert_loads_csv("1,2\n3,abc\n", "r.csv"); },
                     "r.csv: line 2 column 2: 'abc' is not a number");
  expect_parse_error([] { parse_expert_loads_csv("1,2\n3\n", "r.csv"); },
                     "line 2 has 1 experts, layer 0 has 2");
  expect_parse_error([] { parse_expert_loads_csv("1,-2\n", "r.csv"); },
                     "at line 1 column 2 must be finite and non-negative");
  expect_parse_error([] { parse_expert_loads_csv("1,,2\n", "r.csv"); }, "line 1 column 2");
  expect_parse_error([] { parse_expert_loads_csv("# only a comment\n", "r.csv"); }, "no rows");
}

TEST(ExpertLoadsFile, PicksTheFormatByContentAndNamesUnreadableFiles) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("moescope_loads_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string json_path = (dir / "loads.txt").string();
  std::ofstream(json_path) << "  \n[[3, 1]]";
  const std::string csv_path = (dir / "loads.data").string();
  std::ofstream(csv_path) << "3,1\n2,2\n";
  const std::string empty_path = (dir / "empty.csv").string();
  std::ofstream(empty_path) << " \n";

  EXPECT_EQ(read_expert_loads_file(json_path).num_layers, 1);
  EXPECT_EQ(read_expert_loads_file(csv_path).num_layers, 2);
  expect_parse_error([&] { read_expert_loads_file(empty_path); },
                     empty_path + ": the loads file is empty");
  const std::string missing = (dir / "missing.json").string();
  expect_parse_error([&] { read_expert_loads_file(missing); }, missing + ": cannot open");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moescope::balancer
