# moescope_add_test(NAME name SOURCES ... [LIBS ...] LABELS label...)
# One GoogleTest executable; each TEST() becomes a CTest test carrying the component labels.
include(GoogleTest)
function(moescope_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main moescope_warnings)
  # Tests find the tree and the built tools through these variables. They are set by running
  # the test under `cmake -E env` (CTest's ENVIRONMENT property cannot carry two variables
  # through gtest_discover_tests). The configured Python's folder comes first on PATH, so the
  # `python3` that tests start is the build's (MOESCOPE_PYTHON).
  set(_python_path "")
  if(Python3_EXECUTABLE)
    get_filename_component(_python_bin "${Python3_EXECUTABLE}" DIRECTORY)
    set(_python_path "--modify;PATH=path_list_prepend:${_python_bin};")
  endif()
  set_target_properties(${T_NAME} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
    CROSSCOMPILING_EMULATOR "${CMAKE_COMMAND};-E;env;${_python_path}MOESCOPE_BUILD_DIR=${CMAKE_BINARY_DIR};MOESCOPE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  # Listing the tests loads the executable's libraries (LibTorch: seconds on a busy machine),
  # so discovery gets more than CMake's default 5 s.
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 120
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()

# moescope_add_skipped_test(NAME name LABELS label... REASON text)
# A test that cannot be built or run here (a missing dependency, no GPU) is still registered:
# it prints the reason and CTest reports it as skipped, never silently absent.
function(moescope_add_skipped_test)
  cmake_parse_arguments(T "" "NAME;REASON" "LABELS" ${ARGN})
  add_test(NAME ${T_NAME} COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/scripts/skip_test.sh "${T_REASON}")
  set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${T_LABELS}")
  set_property(GLOBAL APPEND PROPERTY MOESCOPE_SKIPPED_TESTS "${T_NAME}: ${T_REASON}")
endfunction()

# moescope_add_gpu_test(NAME name LABELS label... [TIMEOUT s] COMMAND command...)
# A check that needs an NVIDIA GPU: registered to run where one answered at configure time,
# else registered as skipped with that reason.
function(moescope_add_gpu_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "LABELS;COMMAND" ${ARGN})
  if(NOT MOESCOPE_HAVE_GPU)
    moescope_add_skipped_test(NAME ${T_NAME} LABELS ${T_LABELS}
      REASON "no NVIDIA GPU on this machine (tests/device/run.sh runs it on the GPU machine)")
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()
