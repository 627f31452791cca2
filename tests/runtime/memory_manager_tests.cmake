# Memory manager tests (issue 6), included by tests/runtime/CMakeLists.txt (torch builds only).
moescope_add_test(NAME runtime_memory_manager_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_manager_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/expert_offload_checkpoint_test.cpp
  LIBS moescope_runtime moescope_balancer moescope_torch moescope_trace
  LABELS runtime)
