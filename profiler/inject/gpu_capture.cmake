# The GPU half of the capture (CUPTI activity + NCCL interposition) as an OBJECT library, so
# every object lands in whatever links it: a static archive would drop the interposed nccl*
# definitions, which nothing in the shim references.
#
# Included from profiler/inject/CMakeLists.txt. Needs only the CUPTI headers (CUDA toolkit);
# CUPTI, the CUDA runtime and NCCL are all found with dlopen/dlsym at run time.
find_path(MOESCOPE_CUPTI_INCLUDE_DIR cupti_activity.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${MOESCOPE_NVTX_INCLUDE_DIR}
  PATHS /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include)
if(NOT MOESCOPE_CUPTI_INCLUDE_DIR)
  message(STATUS "moescope: CUPTI headers not found: no GPU capture (moescope_gpu_capture)")
  return()
endif()

add_library(moescope_gpu_capture OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/cupti_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_buffer_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_record_translator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_capture.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_injection.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_gpu_events.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_completion_tracker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_op_recorder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_interpose.cpp)
target_include_directories(moescope_gpu_capture PUBLIC
  ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/profiler/recorder/include)
target_include_directories(moescope_gpu_capture SYSTEM PUBLIC ${MOESCOPE_CUPTI_INCLUDE_DIR})
set_target_properties(moescope_gpu_capture PROPERTIES POSITION_INDEPENDENT_CODE ON)
# Only the interposed nccl* functions and InitializeInjection are exported (marked default).
target_compile_options(moescope_gpu_capture PRIVATE -fvisibility=hidden)
target_link_libraries(moescope_gpu_capture PUBLIC Threads::Threads ${CMAKE_DL_LIBS}
                      PRIVATE moescope_warnings)
