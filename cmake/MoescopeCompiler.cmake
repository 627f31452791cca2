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
