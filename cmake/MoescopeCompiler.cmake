# Compiler settings shared by every moescope target.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  # Paths relative to the source tree and no working directory in the hash, so a fresh clone
  # in another folder (CI) reuses what an earlier build compiled.
  set(_ccache ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
      ${CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${_ccache})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_ccache})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_ccache})
endif()

# Debug info of RelWithDebInfo builds: line tables (-g1) by default. They keep backtraces and
# file:line in profilers, debuggers and sanitizer reports, at a quarter of the size of full
# debug info (a GoogleTest translation unit: 4.7 MB with -g, 1.3 MB with -g1) and half the
# compile time of a translation unit that includes torch's headers (runtime/src/router.cpp: 50 s
# with -O2 -g, 25 s with -g1; docs/performance.md). A test build with full debug info filled
# CI's disk. MOESCOPE_DEBUG_INFO=full (or a Debug build) gives variables.
set(MOESCOPE_DEBUG_INFO lines CACHE STRING "Debug info in RelWithDebInfo builds: lines (-g1) or full (-g)")
set_property(CACHE MOESCOPE_DEBUG_INFO PROPERTY STRINGS lines full)
if(MOESCOPE_DEBUG_INFO STREQUAL "lines")
  add_compile_options($<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:C,CXX>>:-g1>)
elseif(NOT MOESCOPE_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "MOESCOPE_DEBUG_INFO is '${MOESCOPE_DEBUG_INFO}': use lines or full")
endif()

# Warnings for our own code only; third-party headers come in as SYSTEM includes.
add_library(moescope_warnings INTERFACE)
target_compile_options(moescope_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra>)

if(MOESCOPE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

if(MOESCOPE_BUILD_FUZZ)
  # Coverage for libFuzzer in every library the fuzz targets link.
  # Undefined behaviour stops the run like a crash (else UBSan only prints and fuzzing goes on).
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
