# Toolchain for the pip wheel: binaries that run wherever torch's own manylinux_2_28 wheels run.
#
# Zig's clang (PyPI `ziglang`, a build requirement in pyproject.toml) links against glibc 2.28's
# symbol versions whatever glibc the build machine has, and links its libc++ statically, so the
# binaries need no GLIBC_2.29+ symbol and no libstdc++ (`auditwheel show` checks both). The
# capture shims export only their version-script symbols, so the static libc++ inside them never
# interposes the libstdc++ of the program they are loaded into.
#
# Zig's own glibc 2.28 headers come first; the build machine's /usr/include is searched after
# them (-idirafter), for third-party headers only (nlohmann/json, CLI11, zstd, ImGui, GLFW, GL).
#
# The zig binary: $MOESCOPE_ZIG, else the `ziglang` package of the Python building the wheel. CMake wants one executable per compiler, so thin wrappers are written next to
# the build.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
# Third-party libraries and headers are Debian's (multiarch folders).
set(CMAKE_LIBRARY_ARCHITECTURE x86_64-linux-gnu)
set(MOESCOPE_GLIBC_TARGET x86_64-linux-gnu.2.28)

# Found once, in the project's own configure; CMake's compiler checks (try_compile projects, which
# read this file again without the project's cache) get it through
# CMAKE_TRY_COMPILE_PLATFORM_VARIABLES.
if(NOT MOESCOPE_ZIG AND DEFINED ENV{MOESCOPE_ZIG})
  set(MOESCOPE_ZIG $ENV{MOESCOPE_ZIG})
endif()
if(NOT MOESCOPE_ZIG)
  # The Python pip builds with (scikit-build-core puts it in the initial cache), which has the
  # build requirements; else the first on PATH.
  if(Python_EXECUTABLE)
    set(_python ${Python_EXECUTABLE})
  else()
    find_program(_python NAMES python3 python REQUIRED)
  endif()
  execute_process(
    COMMAND ${_python} -c
            "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))"
    OUTPUT_VARIABLE MOESCOPE_ZIG OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _found)
  if(NOT _found EQUAL 0)
    message(FATAL_ERROR "manylinux_2_28 toolchain: no zig in ${_python} "
                        "(pip install ziglang, or set MOESCOPE_ZIG)")
  endif()
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MOESCOPE_ZIG)
set(_zig ${MOESCOPE_ZIG})

set(_wrappers ${CMAKE_BINARY_DIR}/zig-wrappers)
foreach(_tool cc c++)
  file(WRITE ${_wrappers}/zig-${_tool}.in
       "#!/bin/sh\nexec \"${_zig}\" ${_tool} -target ${MOESCOPE_GLIBC_TARGET} \"$@\" -idirafter /usr/include\n")
  file(COPY_FILE ${_wrappers}/zig-${_tool}.in ${_wrappers}/zig-${_tool} ONLY_IF_DIFFERENT)
  file(CHMOD ${_wrappers}/zig-${_tool} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
       GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
set(CMAKE_C_COMPILER ${_wrappers}/zig-cc)
set(CMAKE_CXX_COMPILER ${_wrappers}/zig-c++)

# Libraries the wheel carries inside its binaries (zstd, zlib) are linked statically.
set(MOESCOPE_STATIC_COMPRESSION ON)
# libGL.so.1 (in the manylinux policy's list of system libraries), not GLVND's libOpenGL.so.0.
set(OpenGL_GL_PREFERENCE LEGACY)
# The viewer's GLFW travels in the wheel (cmake/MoescopeInstall.cmake).
set(MOESCOPE_BUNDLE_GLFW ON)
