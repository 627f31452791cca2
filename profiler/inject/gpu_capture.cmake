# The GPU half of the capture as OBJECT libraries, so every object lands in whatever links it: a
# static archive would drop the interposed nccl* definitions, which nothing in the shim
# references.
#   moescope_gpu_capture      CUPTI activity, NCCL op recording and GPU completion timing
#   moescope_nccl_interposer  the exported ncclX entry points and the search for the real NCCL;
#                             left out of libmoescope_inject_no_nccl.so
#
# Included from profiler/inject/CMakeLists.txt. Needs only the CUPTI headers (CUDA toolkit);
# CUPTI, the CUDA runtime and NCCL are all found with dlopen/dlsym at run time.
#
# Where toolkits put the CUPTI headers: next to the CUDA headers (CUDA 12+ Linux packages), under
# <toolkit>/extras/CUPTI/include (runfile installs, older toolkits, Windows), and in the PyPI
# wheels torch depends on (nvidia-cuda-cupti: nvidia/cu13/include, nvidia/cuda_cupti/include for
# CUDA 12). The toolkit's come first; the shim checks at run time that the loaded libcupti has
# the version of the headers found here (cupti_compatibility.h).
set(_cupti_hints ${CUDAToolkit_INCLUDE_DIRS} ${MOESCOPE_NVTX_INCLUDE_DIR})
foreach(root ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_ROOT} $ENV{CUDA_HOME} $ENV{CUDA_PATH}
             /usr/local/cuda)
  list(APPEND _cupti_hints ${root}/include ${root}/extras/CUPTI/include)
endforeach()
foreach(dir ${CUDAToolkit_INCLUDE_DIRS})
  list(APPEND _cupti_hints ${dir}/../extras/CUPTI/include)
endforeach()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
            "import nvidia, os; print(';'.join(os.path.join(p, d, 'include') for p in nvidia.__path__ for d in ('cu13', 'cuda_cupti')))"
    OUTPUT_VARIABLE _cupti_wheel_includes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND _cupti_hints ${_cupti_wheel_includes})
endif()
find_path(MOESCOPE_CUPTI_INCLUDE_DIR cupti_activity.h HINTS ${_cupti_hints})
if(NOT MOESCOPE_CUPTI_INCLUDE_DIR)
  set(MOESCOPE_GPU_CAPTURE_REASON "CUPTI headers (cupti_activity.h) not found" PARENT_SCOPE)
  message(STATUS "moescope: CUPTI headers not found: the shim has no GPU capture")
  return()
endif()

add_library(moescope_gpu_capture OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/cupti_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_compatibility.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_buffer_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_record_translator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_capture.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_injection.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cupti_client_interpose.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_gpu_events.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_completion_tracker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_op_recorder.cpp)
add_library(moescope_nccl_interposer OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/nccl_library.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_capture.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_interpose.cpp)
foreach(part moescope_gpu_capture moescope_nccl_interposer)
  target_include_directories(${part} PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_include_directories(${part} SYSTEM PUBLIC ${MOESCOPE_CUPTI_INCLUDE_DIR})
  set_target_properties(${part} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # Only the interposed nccl* / cupti* functions and InitializeInjection are exported (marked
  # default).
  target_compile_options(${part} PRIVATE -fvisibility=hidden)
  target_link_libraries(${part} PUBLIC moescope_recorder_api Threads::Threads ${CMAKE_DL_LIBS}
                        PRIVATE moescope_warnings)
endforeach()
