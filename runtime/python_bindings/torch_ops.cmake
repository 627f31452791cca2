# libmoescope_runtime_torch_ops.so: the runtime registered with PyTorch's dispatcher
# (TORCH_LIBRARY ops and torch::class_), loaded by the Python package moescope.runtime with
# torch.ops.load_library (docs/runtime.md, "From Python"). Built with the runtime, so only when
# LibTorch was found; the profiler-only build and wheel are unaffected.

# The torch it is compiled against, written next to it: the Python loader refuses another torch
# (C++ ABI) with a clear message instead of a crash or an undefined symbol.
moescope_python_torch_version(MOESCOPE_RUNTIME_OPS_BUILT_FOR
  "moescope_runtime_torch_ops: torch.__version__ unreadable; not built")
if(NOT MOESCOPE_RUNTIME_OPS_BUILT_FOR)
  return()
endif()

# Two translation units: the config parser is torch-light, the registrations include torch.
add_library(moescope_runtime_torch_ops MODULE
  ${CMAKE_CURRENT_LIST_DIR}/moe_config_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/torch_library_runtime.cpp)
target_link_libraries(moescope_runtime_torch_ops PRIVATE moescope_runtime moescope_torch
                      moescope_warnings)
# Found next to itself in the build tree (lib/) and in an install (libdir).
set_target_properties(moescope_runtime_torch_ops PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}
  BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN")
target_link_options(moescope_runtime_torch_ops PRIVATE -Wl,--as-needed)
set(_runtime_ops_version_file
    ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/libmoescope_runtime_torch_ops.so.torch_version)
file(WRITE ${_runtime_ops_version_file} "${MOESCOPE_RUNTIME_OPS_BUILT_FOR}\n")
install(TARGETS moescope_runtime_torch_ops LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        COMPONENT runtime_python)
install(FILES ${_runtime_ops_version_file} DESTINATION ${CMAKE_INSTALL_LIBDIR}
        COMPONENT runtime_python)

# The wheel (pyproject.toml) is torch-free by default. Built with
#   pip wheel . --no-build-isolation -C cmake.define.MOESCOPE_WITH_TORCH=ON \
#       -C cmake.define.MOESCOPE_WHEEL_RUNTIME=ON -C cmake.define.MOESCOPE_PYTHON=$(which python)
# (the build's Python must have the torch the wheel is for) it also carries the extension, the
# runtime library and the recorder library it links, next to the shims in the wheel's lib/,
# all found through $ORIGIN; torch's own libraries are the ones `import torch` loaded.
option(MOESCOPE_WHEEL_RUNTIME "pip install .: put the runtime's torch extension in the wheel" OFF)
if(SKBUILD AND MOESCOPE_WHEEL_RUNTIME)
  set_target_properties(moescope_runtime moescope_recorder PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS moescope_runtime_torch_ops moescope_runtime moescope_recorder
          LIBRARY DESTINATION ${SKBUILD_DATA_DIR}/${CMAKE_INSTALL_LIBDIR} COMPONENT wheel)
  install(FILES ${_runtime_ops_version_file}
          DESTINATION ${SKBUILD_DATA_DIR}/${CMAKE_INSTALL_LIBDIR} COMPONENT wheel)
endif()
