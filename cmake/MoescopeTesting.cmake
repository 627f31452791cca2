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
  # through gtest_discover_tests).
  set_target_properties(${T_NAME} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
    CROSSCOMPILING_EMULATOR "${CMAKE_COMMAND};-E;env;MOESCOPE_BUILD_DIR=${CMAKE_BINARY_DIR};MOESCOPE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()
