# sync_count_check (tests/device/sync_count_check.cpp): a recorded MoELayer step synchronizes
# with the GPU as often as a plain one. Needs a LibTorch built with CUDA (its c10_cuda headers and
# libraries), not nvcc, and no GoogleTest; run it on the GPU machine: <build>/bin/sync_count_check.
if(MOESCOPE_HAVE_TORCH AND CAFFE2_USE_CUDA AND TARGET moescope_runtime)
  add_executable(sync_count_check ${CMAKE_CURRENT_LIST_DIR}/sync_count_check.cpp)
  target_link_libraries(sync_count_check PRIVATE moescope_runtime moescope_torch moescope_trace
                                                 moescope_warnings)
endif()
