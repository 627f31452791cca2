# Tests of the GPU half of the capture (CUPTI translation, NCCL interposition), all on CPU.
# Included from tests/capture/CMakeLists.txt.
if(NOT TARGET moescope_gpu_capture)
  foreach(test cupti_capture_test cupti_injection_test nccl_completion_test
               nccl_runtime_events_test nccl_interpose_test)
    moescope_add_skipped_test(NAME ${test} LABELS capture
      REASON "the shim's GPU capture is not built (no CUPTI headers)")
  endforeach()
  return()
endif()

# CUPTI: translator and capture driven with constructed records through a fake CUPTI.
moescope_add_test(NAME cupti_capture_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cupti_translator_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cupti_capture_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cupti_compatibility_test.cpp
  LIBS moescope_gpu_capture moescope_recorder trace_test_reading LABELS capture)

# The process-level switch (driver check, eager/lazy/off, the real libcupti without a GPU); its
# own executable because the state is per process.
moescope_add_test(NAME cupti_injection_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cupti_injection_test.cpp
  LIBS moescope_gpu_capture moescope_recorder trace_test_reading LABELS capture)

# A real CUPTI of another version (CUDA 12's, as Triton's wheel carries it) must be refused by
# version, before anything is enabled.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_EXECUTABLE)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
            "import glob, os, triton; found = sorted(glob.glob(os.path.join(os.path.dirname(triton.__file__), 'backends', 'nvidia', 'lib', 'cupti', 'libcupti.so.1[0-2]'))); print(found[0] if found else '')"
    OUTPUT_VARIABLE _older_cupti OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_older_cupti)
    target_compile_definitions(cupti_injection_test PRIVATE
      MOESCOPE_TEST_OLDER_CUPTI="${_older_cupti}")
  endif()
endif()

# Two CUPTI clients in one process (moescope's capture and the program's own profiler, as
# torch.profiler is) against a TEST-ONLY stand-in libcupti.so.13 that enforces CUPTI 13.0's
# rules, in its own folder so no other test's dlopen("libcupti.so.13") finds it.
add_library(cupti_rules_for_tests SHARED ${CMAKE_CURRENT_LIST_DIR}/cupti_rules_for_tests.cpp)
set_target_properties(cupti_rules_for_tests PROPERTIES OUTPUT_NAME cupti SOVERSION 13
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/cupti_rules_for_tests)
target_include_directories(cupti_rules_for_tests PRIVATE ${PROJECT_SOURCE_DIR}/profiler/inject)
target_include_directories(cupti_rules_for_tests SYSTEM PRIVATE ${MOESCOPE_CUPTI_INCLUDE_DIR})
target_link_libraries(cupti_rules_for_tests PRIVATE moescope_warnings)
add_executable(cupti_two_clients_program ${CMAKE_CURRENT_LIST_DIR}/cupti_two_clients_program.cpp)
target_include_directories(cupti_two_clients_program SYSTEM PRIVATE ${MOESCOPE_CUPTI_INCLUDE_DIR})
target_link_libraries(cupti_two_clients_program PRIVATE cupti_rules_for_tests ${CMAKE_DL_LIBS}
                      moescope_warnings)
set_target_properties(cupti_two_clients_program PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
moescope_add_test(NAME cupti_two_clients_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cupti_two_clients_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/capture_test_support.cpp
  LIBS trace_test_reading LABELS capture)
capture_test_uses_support(cupti_two_clients_test)
add_dependencies(cupti_two_clients_test moescope moescope_inject cupti_two_clients_program)

# NCCL op recording and GPU completion timing with a fake event layer and clock.
moescope_add_test(NAME nccl_completion_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_completion_test.cpp
  LIBS moescope_gpu_capture moescope_recorder LABELS capture)

# The real CUDA runtime's functions resolve by name; without a GPU they fail softly.
if(TARGET CUDA::cudart)
  moescope_add_test(NAME nccl_runtime_events_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_runtime_events_test.cpp
    LIBS moescope_gpu_capture moescope_recorder CUDA::cudart LABELS capture)
else()
  moescope_add_skipped_test(NAME nccl_runtime_events_test LABELS capture
                            REASON "no CUDA runtime library (CUDA::cudart) found")
endif()

# Every NCCL entry point the torch wheel's libtorch_cuda.so imports is interposed or on the
# reviewed pass-through list (profiler/inject/nccl_passed_through.txt). The wheel is found
# without importing torch (fast); a CPU wheel has no libtorch_cuda.so and skips the test.
set(_torch_cuda_library "")
if(Python3_EXECUTABLE)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
            "import importlib.util, os; s = importlib.util.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin), 'lib', 'libtorch_cuda.so') if s else '')"
    OUTPUT_VARIABLE _torch_cuda_library OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(_torch_cuda_library AND EXISTS "${_torch_cuda_library}")
  add_test(NAME nccl_entry_points_test
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/nccl_entry_points_check.sh ${_torch_cuda_library}
                   $<TARGET_FILE:moescope_inject>
                   ${PROJECT_SOURCE_DIR}/profiler/inject/nccl_passed_through.txt)
  set_tests_properties(nccl_entry_points_test PROPERTIES LABELS capture TIMEOUT 60)
else()
  moescope_add_skipped_test(NAME nccl_entry_points_test LABELS capture
    REASON "no libtorch_cuda.so in the torch wheel of ${Python3_EXECUTABLE} (a CPU wheel?)")
endif()

# NCCL interposition through the real shim, against a TEST-ONLY NCCL stand-in library.
find_path(MOESCOPE_TEST_NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/local/cuda/include)
if(NOT MOESCOPE_TEST_NCCL_INCLUDE_DIR OR NOT CUDAToolkit_FOUND)
  moescope_add_skipped_test(NAME nccl_interpose_test LABELS capture
                            REASON "${MOESCOPE_WHY_NCCL}")
  return()
endif()

add_library(nccl_standin_for_tests SHARED ${CMAKE_CURRENT_LIST_DIR}/nccl_standin_for_tests.cpp)
target_include_directories(nccl_standin_for_tests PRIVATE ${PROJECT_SOURCE_DIR}/profiler/inject)
target_link_libraries(nccl_standin_for_tests PRIVATE moescope_warnings)

add_executable(nccl_interpose_program ${CMAKE_CURRENT_LIST_DIR}/nccl_interpose_program.cpp)
target_include_directories(nccl_interpose_program SYSTEM PRIVATE
  ${MOESCOPE_TEST_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(nccl_interpose_program PRIVATE nccl_standin_for_tests ${CMAKE_DL_LIBS}
                      moescope_warnings)
set_target_properties(nccl_interpose_program PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

moescope_add_test(NAME nccl_interpose_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_interpose_test.cpp
  LIBS trace_test_reading moescope_recorder_api LABELS capture)
target_include_directories(nccl_interpose_test PRIVATE
  ${PROJECT_SOURCE_DIR}/profiler/inject)
target_include_directories(nccl_interpose_test SYSTEM PRIVATE
  ${MOESCOPE_TEST_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(nccl_interpose_test PRIVATE
  MOESCOPE_NCCL_PROGRAM="$<TARGET_FILE:nccl_interpose_program>"
  MOESCOPE_INJECT_LIBRARY="$<TARGET_FILE:moescope_inject>")
add_dependencies(nccl_interpose_test nccl_interpose_program moescope_inject)

# The real NCCL's host-only calls (ncclGetVersion, ncclGetUniqueId work without a GPU).
find_library(MOESCOPE_TEST_REAL_NCCL NAMES nccl libnccl.so.2
  HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS /usr/local/cuda/lib64 /usr/local/cuda/lib)
if(MOESCOPE_TEST_REAL_NCCL)
  add_executable(nccl_real_host_calls_program
    ${CMAKE_CURRENT_LIST_DIR}/nccl_real_host_calls_program.cpp)
  target_include_directories(nccl_real_host_calls_program SYSTEM PRIVATE
    ${MOESCOPE_TEST_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(nccl_real_host_calls_program PRIVATE ${MOESCOPE_TEST_REAL_NCCL})
  set_target_properties(nccl_real_host_calls_program PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # The real NCCL in a local scope (as the torch wheel loads it), reached through a library
  # that the program dlopen()s with RTLD_LOCAL; and a probe with no NCCL loaded at all.
  add_library(nccl_local_caller SHARED ${CMAKE_CURRENT_LIST_DIR}/nccl_local_caller.cpp)
  target_include_directories(nccl_local_caller SYSTEM PRIVATE
    ${MOESCOPE_TEST_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(nccl_local_caller PRIVATE ${MOESCOPE_TEST_REAL_NCCL})
  add_executable(nccl_local_scope_program ${CMAKE_CURRENT_LIST_DIR}/nccl_local_scope_program.cpp)
  target_link_libraries(nccl_local_scope_program PRIVATE ${CMAKE_DL_LIBS} moescope_warnings)
  set_target_properties(nccl_local_scope_program PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(nccl_interpose_test PRIVATE
    MOESCOPE_REAL_NCCL_PROGRAM="$<TARGET_FILE:nccl_real_host_calls_program>"
    MOESCOPE_NCCL_LOCAL_SCOPE_PROGRAM="$<TARGET_FILE:nccl_local_scope_program>"
    MOESCOPE_NCCL_LOCAL_CALLER="$<TARGET_FILE:nccl_local_caller>"
    MOESCOPE_INJECT_NO_NCCL_LIBRARY="$<TARGET_FILE:moescope_inject_no_nccl>")
  add_dependencies(nccl_interpose_test nccl_real_host_calls_program nccl_local_scope_program
                   nccl_local_caller moescope_inject_no_nccl)
endif()
