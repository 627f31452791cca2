# The MoE runtime's memory manager (issue 6): dispatch buffer pool, receive cap, memory
# accounting and the expert-aware optimizer offload. Included by runtime/CMakeLists.txt after
# moescope_runtime is defined (torch builds only).
target_sources(moescope_runtime PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/src/dispatch_buffer_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/receive_cap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/memory_accounting.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/expert_optimizer_offload.cpp)
