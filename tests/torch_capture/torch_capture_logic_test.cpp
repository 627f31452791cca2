// The torch-free half of the C++ torch capture: what a c10d operator is, all-to-all split
// bytes, communicator ids, operator span names and their cap.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collective_classification.h"
#include "operator_span_names.h"

namespace moescope::torch_capture {
namespace {

TEST(CollectiveClassification, EveryC10dOperatorOfTorch2HasItsKind) {
  const std::vector<std::pair<const char*, uint32_t>> operators = {
      {"c10d::allreduce_", MOESCOPE_COMM_ALL_REDUCE},
      {"c10d::allreduce_coalesced_", MOESCOPE_COMM_ALL_REDUCE},
      {"c10d::_allgather_base_", MOESCOPE_COMM_ALL_GATHER},
      {"c10d::allgather_", MOESCOPE_COMM_ALL_GATHER},
      {"c10d::allgather_coalesced_", MOESCOPE_COMM_ALL_GATHER},
      {"c10d::allgather_into_tensor_coalesced_", MOESCOPE_COMM_ALL_GATHER},
      {"c10d::_reduce_scatter_base_", MOESCOPE_COMM_REDUCE_SCATTER},
      {"c10d::reduce_scatter_", MOESCOPE_COMM_REDUCE_SCATTER},
      {"c10d::reduce_scatter_tensor_coalesced_", MOESCOPE_COMM_REDUCE_SCATTER},
      {"c10d::alltoall_base_", MOESCOPE_COMM_ALL_TO_ALL},
      {"c10d::alltoall_", MOESCOPE_COMM_ALL_TO_ALL},
      {"c10d::broadcast_", MOESCOPE_COMM_BROADCAST},
      {"c10d::reduce_", MOESCOPE_COMM_REDUCE},
      {"c10d::barrier", MOESCOPE_COMM_BARRIER},
      {"c10d::monitored_barrier_", MOESCOPE_COMM_BARRIER},
      {"c10d::gather_", MOESCOPE_COMM_GATHER},
      {"c10d::scatter_", MOESCOPE_COMM_SCATTER},
      {"c10d::send", MOESCOPE_COMM_SEND},
      {"c10d::recv_", MOESCOPE_COMM_RECV},
      {"c10d::recv_any_source_", MOESCOPE_COMM_RECV},
  };
  for (const auto& [name, kind] : operators) EXPECT_EQ(collective_kind(name), kind) << name;
  // Names of other spellings (NCCL's, record_param_comms') read the same; unknown ones are 0.
  EXPECT_EQ(collective_kind("all_to_allv"), MOESCOPE_COMM_ALL_TO_ALL);
  EXPECT_EQ(collective_kind("allgather_into_tensor_coalesced"), MOESCOPE_COMM_ALL_GATHER);
  EXPECT_EQ(collective_kind("c10d::_resolve_process_group"), 0u);
}

TEST(CollectiveClassification, DisplayNamesAreWhatTheUserCalled) {
  EXPECT_EQ(collective_display_name("c10d::alltoall_base_"), "all_to_all_single");
  EXPECT_EQ(collective_display_name("c10d::_allgather_base_"), "all_gather_into_tensor");
  EXPECT_EQ(collective_display_name("c10d::_reduce_scatter_base_"), "reduce_scatter_tensor");
  EXPECT_EQ(collective_display_name("allreduce_"), "all_reduce");
  EXPECT_EQ(collective_display_name("c10d::some_new_op_"), "some_new_op");
}

TEST(CollectiveClassification, SentArgumentIsTheInputNotTheOutput) {
  EXPECT_EQ(sent_argument_index(MOESCOPE_COMM_ALL_TO_ALL,
                                {"output", "input", "process_group", "output_split_sizes"}),
            1);
  EXPECT_EQ(sent_argument_index(MOESCOPE_COMM_ALL_GATHER,
                                {"output_tensors", "input_tensors", "process_group"}),
            1);
  EXPECT_EQ(sent_argument_index(MOESCOPE_COMM_ALL_REDUCE, {"tensors", "process_group"}), 0);
  EXPECT_EQ(sent_argument_index(MOESCOPE_COMM_BARRIER, {"tensor", "process_group"}), -1);
  EXPECT_EQ(received_argument_index({"output", "input", "process_group"}), 0);
  EXPECT_EQ(received_argument_index({"process_group"}), -1);
}

TEST(CollectiveClassification, AllToAllSplitBytes) {
  // 7 rows of 12 bytes split 2 + 5.
  EXPECT_EQ(all_to_all_split_bytes({2, 5}, 7, 84, 2), (std::vector<uint64_t>{24, 60}));
  // No splits: even.
  EXPECT_EQ(all_to_all_split_bytes({}, 8, 64, 4), (std::vector<uint64_t>{16, 16, 16, 16}));
  // Splits that do not add up, an uneven "even" split, negative splits: nothing invented.
  EXPECT_TRUE(all_to_all_split_bytes({2, 4}, 7, 84, 2).empty());
  EXPECT_TRUE(all_to_all_split_bytes({}, 7, 84, 2).empty());
  EXPECT_TRUE(all_to_all_split_bytes({-1, 8}, 7, 84, 2).empty());
  EXPECT_TRUE(all_to_all_split_bytes({}, 0, 0, 2).empty());
}

TEST(CollectiveClassification, CommIdDependsOnGroupAndBackendOnly) {
  EXPECT_EQ(process_group_comm_id("0", "gloo"), process_group_comm_id("0", "gloo"));
  EXPECT_NE(process_group_comm_id("0", "gloo"), process_group_comm_id("1", "gloo"));
  EXPECT_NE(process_group_comm_id("0", "gloo"), process_group_comm_id("0", "nccl"));
}

TEST(OperatorSpanName, ShapesLikeNsightSystems) {
  OperatorSpanName name("aten::addmm");
  const int64_t bias[] = {4};
  const int64_t input[] = {8, 16};
  name.add_tensor(bias, 1);
  name.add_tensor(input, 2);
  name.add_other();
  EXPECT_EQ(name.finish(), "aten::addmm, sizes = [[4], [8, 16], []]");

  OperatorSpanName list("aten::cat");
  const int64_t a[] = {2, 3};
  list.begin_tensor_list();
  list.add_tensor(a, 2);
  list.add_tensor(a, 2);
  list.end_tensor_list();
  list.add_other();
  EXPECT_EQ(list.finish(), "aten::cat, sizes = [[[2, 3], [2, 3]], []]");

  OperatorSpanName scalar("aten::zeros");
  scalar.add_tensor(nullptr, 0);
  EXPECT_EQ(scalar.finish(), "aten::zeros, sizes = [[]]");
}

std::vector<std::string> g_interned;
moescope_name_t fake_intern(const char* text, size_t length) {
  g_interned.emplace_back(text, length);
  return static_cast<moescope_name_t>(g_interned.size());
}

TEST(CappedNameInterner, FullNamesUpToTheCapThenBareNames) {
  g_interned.clear();
  CappedNameInterner names(2, &fake_intern);
  const moescope_name_t first = names.intern("aten::mm, sizes = [[1]]", "aten::mm");
  EXPECT_EQ(names.intern("aten::mm, sizes = [[1]]", "aten::mm"), first);  // interned once
  names.intern("aten::mm, sizes = [[2]]", "aten::mm");
  EXPECT_TRUE(names.capped());
  const moescope_name_t bare = names.intern("aten::mm, sizes = [[3]]", "aten::mm");
  EXPECT_EQ(g_interned.at(bare - 1), "aten::mm");
  EXPECT_EQ(names.intern("aten::mm, sizes = [[4]]", "aten::mm"), bare);
  EXPECT_EQ(names.intern("aten::mm, sizes = [[1]]", "aten::mm"), first);  // known names stay
  EXPECT_EQ(names.num_full_names(), 2u);
  EXPECT_EQ(g_interned.size(), 3u);
}

}  // namespace
}  // namespace moescope::torch_capture
