# `cmake --install`: CLI, shim, libraries, public headers and a CMake package config so that a
# LibTorch project can find_package(moescope) and link moescope::runtime.
include(CMakePackageConfigHelpers)
set(MOESCOPE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/moescope)

set(_moescope_install_targets moescope_warnings moescope_trace moescope_recorder_api moescope_recorder)
foreach(t moescope_torch moescope_inject moescope_inject_no_nccl moescope_analysis moescope_balancer moescope_kernels moescope_runtime)
  if(TARGET ${t})
    list(APPEND _moescope_install_targets ${t})
  endif()
endforeach()
install(TARGETS ${_moescope_install_targets} EXPORT moescopeTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(t moescope moescope-view moe_train nvtx_ranges)
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
# Public headers of every installed library (each library's include/ folder).
foreach(headers profiler/trace profiler/recorder profiler/analysis profiler/torch_capture balancer
                runtime kernels)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${headers}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
# `pip install .` (pyproject.toml, scikit-build-core): the component `wheel` holds only the
# torch-free tools a profiling user runs, in the same layout (bin/, lib/, share/moescope/python)
# under the wheel's data folder, which pip installs into the Python environment's prefix.
set(_wheel_root "")
if(SKBUILD)
  set(_wheel_root "${SKBUILD_DATA_DIR}/")
endif()
# `moescope_wheel` builds just what the component holds (pyproject.toml's build.targets).
add_custom_target(moescope_wheel)
add_dependencies(moescope_wheel moescope_inject moescope_inject_no_nccl)
foreach(t moescope moescope-view)
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${_wheel_root}${CMAKE_INSTALL_BINDIR} COMPONENT wheel)
    add_dependencies(moescope_wheel ${t})
  endif()
endforeach()
if(SKBUILD AND MOESCOPE_WHEEL_RUNTIME AND TARGET moescope_runtime_torch_ops)
  add_dependencies(moescope_wheel moescope_runtime_torch_ops moescope_runtime moescope_recorder)
endif()
install(TARGETS moescope_inject moescope_inject_no_nccl
        LIBRARY DESTINATION ${_wheel_root}${CMAKE_INSTALL_LIBDIR} COMPONENT wheel)
# The manylinux wheel (MOESCOPE_BUNDLE_GLFW, set by its toolchain) carries the one shared
# library the viewer needs beyond the manylinux policy's system libraries: GLFW (glibc <= 2.27,
# X11 and libGL from the system). It goes next to the shims, and the viewer finds it through its
# RPATH. (auditwheel repair would graft it too, but its RPATH for binaries in the wheel's data
# folder points into the wheel's layout, not the installed one.)
if(MOESCOPE_BUNDLE_GLFW AND TARGET moescope-view)
  list(GET GLFW_LINK_LIBRARIES 0 _glfw_link_library)
  file(REAL_PATH "${_glfw_link_library}" _glfw_library)
  install(FILES ${_glfw_library} DESTINATION ${_wheel_root}${CMAKE_INSTALL_LIBDIR}
          RENAME libglfw.so.3 COMPONENT wheel)  # GLFW 3's SONAME
  set_target_properties(moescope-view PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()

# The Python annotation module (ctypes, no build step) with a generated _install_layout.py
# telling it where the shim is relative to itself, and moescope_startup (the sitecustomize that
# `moescope record` puts on PYTHONPATH). `cmake --install`: both under share/moescope/python,
# which `record` also appends to PYTHONPATH (other runs add it themselves, docs/capture.md). The
# wheel: the package in site-packages, so `import moescope` works in that Python outside a
# recording too; moescope_startup stays in share/moescope/python, and finds the package in
# site-packages when the recorded Python is another one. One copy of the package either way.
set(MOESCOPE_INSTALL_PYTHONDIR ${CMAKE_INSTALL_DATADIR}/moescope/python)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiler/python/moescope_startup
        DESTINATION ${_wheel_root}${MOESCOPE_INSTALL_PYTHONDIR} COMPONENT wheel
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
if(SKBUILD)
  set(_moescope_package_dir ${SKBUILD_PLATLIB_DIR})
  # <prefix>/lib/pythonX.Y/site-packages/moescope -> <prefix>/lib, for every X.Y and for
  # Debian's dist-packages alike.
  set(_moescope_python_to_libdir "../../..")
else()
  set(_moescope_package_dir ${MOESCOPE_INSTALL_PYTHONDIR})
  file(RELATIVE_PATH _moescope_python_to_libdir
       ${CMAKE_INSTALL_FULL_DATADIR}/moescope/python/moescope ${CMAKE_INSTALL_FULL_LIBDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiler/python/moescope
        DESTINATION ${_moescope_package_dir} COMPONENT wheel
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
file(WRITE ${CMAKE_BINARY_DIR}/python_install/_install_layout.py
     "# Written by cmake/MoescopeInstall.cmake: the library directory relative to this file.\n"
     "LIBRARY_DIR = \"${_moescope_python_to_libdir}\"\n")
install(FILES ${CMAKE_BINARY_DIR}/python_install/_install_layout.py
        DESTINATION ${_moescope_package_dir}/moescope COMPONENT wheel)
if(SKBUILD)
  # The C++ capture's sources, compiled for the user's torch on first use or by `python -m
  # moescope build-capture` (moescope/autocapture/torch_capture_build.py): LibTorch's C++ ABI
  # changes with every torch release, so no prebuilt library would fit every user's torch.
  set(_capture_sources ${_moescope_package_dir}/moescope/autocapture/torch_capture_sources)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiler/torch_capture/
          DESTINATION ${_capture_sources} COMPONENT wheel
          FILES_MATCHING PATTERN "*.cpp" PATTERN "*.h" PATTERN "*.map")
  install(FILES ${PROJECT_SOURCE_DIR}/profiler/recorder/include/moescope/recorder.h
          DESTINATION ${_capture_sources}/include/moescope COMPONENT wheel)
  install(FILES ${PROJECT_SOURCE_DIR}/profiler/trace/include/moescope/trace/record_schema.h
          DESTINATION ${_capture_sources}/include/moescope/trace COMPONENT wheel)
endif()
install(EXPORT moescopeTargets NAMESPACE moescope:: DESTINATION ${MOESCOPE_INSTALL_CMAKEDIR})
# The CUDA toolkit torch's CMake config needs in a consumer: the one this build used, when it
# was not a system install torch finds by itself (see moescopeConfig.cmake.in).
set(MOESCOPE_CUDA_TOOLKIT_ROOT "${CUDA_TOOLKIT_ROOT_DIR}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/moescopeConfig.cmake.in
  ${CMAKE_BINARY_DIR}/moescopeConfig.cmake INSTALL_DESTINATION ${MOESCOPE_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/moescopeConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/moescopeConfig.cmake ${CMAKE_BINARY_DIR}/moescopeConfigVersion.cmake
        DESTINATION ${MOESCOPE_INSTALL_CMAKEDIR})
