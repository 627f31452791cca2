# Finds every dependency. Optional parts resolve AUTO to ON/OFF and set MOESCOPE_HAVE_<PART>
# and MOESCOPE_WHY_<PART> (one line: what was found, or what is missing); the configure summary
# (MoescopeSummary.cmake) prints both.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
# zlib and zstd: shared, or static where the binaries must not depend on the build machine's
# copies (MOESCOPE_STATIC_COMPRESSION, set by the wheel's manylinux toolchain). Either way the
# targets are ZLIB::ZLIB and PkgConfig::ZSTD.
if(MOESCOPE_STATIC_COMPRESSION)
  set(ZLIB_USE_STATIC_LIBS ON)
  find_package(ZLIB REQUIRED)
  find_library(MOESCOPE_ZSTD_STATIC_LIBRARY NAMES libzstd.a REQUIRED)
  find_path(MOESCOPE_ZSTD_INCLUDE_DIR zstd.h REQUIRED)
  add_library(PkgConfig::ZSTD STATIC IMPORTED)
  set_target_properties(PkgConfig::ZSTD PROPERTIES IMPORTED_LOCATION ${MOESCOPE_ZSTD_STATIC_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${MOESCOPE_ZSTD_INCLUDE_DIR})
else()
  find_package(ZLIB REQUIRED)
  pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
endif()

# Resolves an AUTO/ON/OFF switch into MOESCOPE_HAVE_<part> and MOESCOPE_WHY_<part>: ON fails
# loudly when the part is missing, OFF turns it off, AUTO follows what was found.
function(moescope_decide part switch found found_text missing_text)
  if(switch STREQUAL "OFF")
    set(MOESCOPE_HAVE_${part} OFF PARENT_SCOPE)
    set(MOESCOPE_WHY_${part} "turned off (MOESCOPE_WITH_${part}=OFF)" PARENT_SCOPE)
  elseif(${found})
    set(MOESCOPE_HAVE_${part} ON PARENT_SCOPE)
    set(MOESCOPE_WHY_${part} "${found_text}" PARENT_SCOPE)
  elseif(switch STREQUAL "ON")
    message(FATAL_ERROR "MOESCOPE_WITH_${part}=ON but ${missing_text}")
  else()
    set(MOESCOPE_HAVE_${part} OFF PARENT_SCOPE)
    set(MOESCOPE_WHY_${part} "${missing_text}" PARENT_SCOPE)
  endif()
endfunction()

# Records a detected (not switchable) part the same way.
function(moescope_detected part found found_text missing_text)
  if(${found})
    set(MOESCOPE_HAVE_${part} ON PARENT_SCOPE)
    set(MOESCOPE_WHY_${part} "${found_text}" PARENT_SCOPE)
  else()
    set(MOESCOPE_HAVE_${part} OFF PARENT_SCOPE)
    set(MOESCOPE_WHY_${part} "${missing_text}" PARENT_SCOPE)
  endif()
endfunction()

# The Python environment the build, the tests and the demo use (scripts/setup.sh chooses it and
# the Makefile passes it): LibTorch comes from its torch wheel, and NVTX, CUPTI and NCCL headers
# from the NVIDIA wheels torch depends on.
set(MOESCOPE_PYTHON "" CACHE FILEPATH "Python interpreter whose torch and NVIDIA wheels the build uses")
if(MOESCOPE_PYTHON)
  set(Python3_EXECUTABLE ${MOESCOPE_PYTHON})
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
set(MOESCOPE_PYTHON_INCLUDE_HINTS "")
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
    "import nvidia, os; print(';'.join(os.path.join(p, d, 'include') for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, 'include'))))"
    OUTPUT_VARIABLE MOESCOPE_PYTHON_INCLUDE_HINTS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
moescope_detected(PYTHON Python3_Interpreter_FOUND
  "${Python3_EXECUTABLE} (Python ${Python3_VERSION}): tests and the demo run with it"
  "no Python 3 interpreter: no torch, no Python tests")

# CUDA toolkit (headers for CUPTI/NVTX are used by the profiler even without nvcc). Without an
# installed toolkit, scripts/setup.sh assembles one from PyPI's NVIDIA wheels in
# .cache/cuda-toolkit (links into the Python environment): used when nothing else is found.
set(_pip_toolkit ${PROJECT_SOURCE_DIR}/.cache/cuda-toolkit)
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND NOT CUDAToolkit_ROOT
   AND EXISTS ${_pip_toolkit}/bin/nvcc)
  find_program(_installed_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(NOT _installed_nvcc)
    set(CMAKE_CUDA_COMPILER ${_pip_toolkit}/bin/nvcc CACHE FILEPATH "nvcc from PyPI's NVIDIA wheels")
    set(CUDAToolkit_ROOT ${_pip_toolkit})
    # torch's own CUDA detection (its FindCUDA) reads this one.
    set(CUDA_TOOLKIT_ROOT_DIR ${_pip_toolkit} CACHE PATH "CUDA toolkit from PyPI's NVIDIA wheels")
  endif()
endif()
# Debian 12's CMake 3.25.1 stops in FindCUDAToolkit on CUDA >= 12, which has no libnvToolsExt,
# in projects that require CMake 3.25: it sets a property on CUDA::nvToolsExt without checking
# that the target exists (fixed in CMake 3.25.2). NVTX3, which superseded that library, is
# header-only, so an empty interface target is what the name stands for now.
if(CMAKE_VERSION VERSION_LESS 3.25.2 AND NOT TARGET CUDA::nvToolsExt)
  add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
endif()
find_package(CUDAToolkit QUIET)
find_path(MOESCOPE_NVTX_INCLUDE_DIR nvtx3/nvToolsExt.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} ${MOESCOPE_PYTHON_INCLUDE_HINTS} PATHS /usr/local/cuda/include)
if(NOT MOESCOPE_NVTX_INCLUDE_DIR)
  message(FATAL_ERROR "The shim and the runtime need the header-only NVTX3 (nvtx3/nvToolsExt.h "
                      "from the CUDA toolkit or PyPI's nvidia-nvtx: scripts/setup.sh installs it); "
                      "set MOESCOPE_NVTX_INCLUDE_DIR to its include folder")
endif()
include(CheckLanguage)
check_language(CUDA)
set(_cuda_found OFF)
if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
  set(_cuda_found ON)
endif()
moescope_decide(CUDA "${MOESCOPE_WITH_CUDA}" _cuda_found
  "nvcc of CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_COMPILER}): the CUDA kernels are compiled"
  "no nvcc or CUDA toolkit found: the kernels build their CPU references only")
if(MOESCOPE_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
  endif()
  enable_language(CUDA)
endif()

# LibTorch from the torch wheel.
# CMake 3.25 knows no C++20 flag for nvcc, and torch's config copies CMAKE_CXX_STANDARD (20) into
# CMAKE_CUDA_STANDARD when unset, which fails its CUDA probe: pin CUDA sources to C++17.
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
endif()
set(_torch_found OFF)
set(_torch_found_text "")
if(NOT MOESCOPE_WITH_TORCH STREQUAL "OFF" AND Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
    "import os, torch; print(torch.utils.cmake_prefix_path, torch.version.cuda or '-', os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.__version__.split('+')[0], sep=';')"
    OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc ERROR_QUIET)
  if(_torch_rc EQUAL 0)
    list(GET _torch_info 0 _torch_prefix)
    list(GET _torch_info 1 _torch_cuda)
    list(GET _torch_info 2 _torch_dir)
    list(GET _torch_info 3 _torch_cxx11_abi)
    list(GET _torch_info 4 _torch_version)
    if(NOT _torch_cuda STREQUAL "-" AND NOT _cuda_found)
      # A CUDA build of torch without a CUDA toolkit here: torch's CMake config would stop the
      # configure ("cannot find the CUDA libraries"). The runtime on CPU needs only LibTorch's
      # CPU side, so link that (libtorch_cpu, libc10) with torch's headers.
      add_library(moescope_libtorch_cpu INTERFACE IMPORTED)
      set_target_properties(moescope_libtorch_cpu PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${_torch_dir}/include;${_torch_dir}/include/torch/csrc/api/include"
        INTERFACE_LINK_LIBRARIES "${_torch_dir}/lib/libtorch_cpu.so;${_torch_dir}/lib/libc10.so")
      set(TORCH_LIBRARIES moescope_libtorch_cpu)
      set(TORCH_CXX_FLAGS -D_GLIBCXX_USE_CXX11_ABI=${_torch_cxx11_abi})
      set(Torch_VERSION ${_torch_version})
      set(CAFFE2_USE_CUDA OFF)
      set(_torch_found ON)
      string(CONCAT _torch_found_text "LibTorch ${_torch_version}, CPU side only (the wheel is "
        "built for CUDA ${_torch_cuda} but no CUDA toolkit is here: scripts/setup.sh installs "
        "one): runtime, moe_train, runtime tests")
    else()
      list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
      # Torch's config looks for cuDNN/nvToolsExt noise we do not need; keep it quiet.
      set(CAFFE2_USE_CUDNN OFF)
      find_package(Torch QUIET)
      if(Torch_FOUND)
        set(_torch_found ON)
        set(_torch_found_text
            "LibTorch ${Torch_VERSION} from the torch wheel: runtime, moe_train, runtime tests")
      endif()
    endif()
  endif()
endif()
moescope_decide(TORCH "${MOESCOPE_WITH_TORCH}" _torch_found "${_torch_found_text}"
  "${Python3_EXECUTABLE} cannot import torch (scripts/setup.sh installs it): no runtime, moe_train or runtime tests")
if(MOESCOPE_HAVE_TORCH)
  # torch's flags carry -D_GLIBCXX_USE_CXX11_ABI; keep them on torch targets only.
  add_library(moescope_torch INTERFACE)
  target_link_libraries(moescope_torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_options(moescope_torch INTERFACE ${TORCH_CXX_FLAGS})
endif()

# Viewer: Debian's libimgui-dev (with GLFW + OpenGL3 backends inside libimgui.a) and GLFW.
# Debian's imgui.pc also links libstb.so for stb_truetype/stb_rect_pack; the viewer compiles
# those from stb's headers instead (viewer/app/stb_font_implementations.cpp), so it links
# libimgui.a alone: one fewer shared library, and none newer than glibc 2.28 in the wheel.
pkg_check_modules(IMGUI QUIET imgui)
pkg_check_modules(GLFW QUIET IMPORTED_TARGET glfw3)
find_package(OpenGL QUIET)
find_path(MOESCOPE_STB_INCLUDE_DIR stb/stb_truetype.h)
find_library(MOESCOPE_IMGUI_LIBRARY NAMES libimgui.a HINTS ${IMGUI_LIBRARY_DIRS})
if(IMGUI_FOUND AND MOESCOPE_IMGUI_LIBRARY AND NOT TARGET moescope_imgui)
  add_library(moescope_imgui STATIC IMPORTED)
  set_target_properties(moescope_imgui PROPERTIES IMPORTED_LOCATION ${MOESCOPE_IMGUI_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES "${IMGUI_INCLUDE_DIRS}")
endif()
set(_viewer_missing "")
foreach(part IMGUI MOESCOPE_IMGUI_LIBRARY GLFW OpenGL MOESCOPE_STB_INCLUDE_DIR)
  if(NOT ${part}_FOUND AND NOT ${part})
    list(APPEND _viewer_missing ${part})
  endif()
endforeach()
set(_viewer_found OFF)
if(NOT _viewer_missing)
  set(_viewer_found ON)
endif()
string(REPLACE ";" ", " _viewer_missing "${_viewer_missing}")
moescope_decide(VIEWER "${MOESCOPE_WITH_VIEWER}" _viewer_found
  "Dear ImGui ${IMGUI_VERSION}, GLFW ${GLFW_VERSION}, OpenGL, stb: moescope-view"
  "missing ${_viewer_missing} (apt-get install libimgui-dev libglfw3-dev libstb-dev): no viewer")

# nccl.h: multi-GPU moe_train and the NCCL interposition tests.
find_path(MOESCOPE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS}
          ${MOESCOPE_PYTHON_INCLUDE_HINTS} PATHS /usr/local/cuda/include)
moescope_detected(NCCL MOESCOPE_NCCL_INCLUDE_DIR
  "nccl.h in ${MOESCOPE_NCCL_INCLUDE_DIR}: NCCL interposition tests, multi-GPU moe_train"
  "no nccl.h: no NCCL interposition tests or multi-GPU moe_train")
# Gloo headers (the torch wheel lacks them): CPU expert-parallel groups in the runtime.
find_path(MOESCOPE_GLOO_INCLUDE_DIR gloo/algorithm.h)
moescope_detected(GLOO MOESCOPE_GLOO_INCLUDE_DIR
  "Gloo headers in ${MOESCOPE_GLOO_INCLUDE_DIR}: CPU expert parallelism, multi-process runtime tests"
  "no gloo/algorithm.h (apt-get install libgloo-dev): no CPU expert-parallel groups")
# A GPU on this machine (the GPU suites run only where one answers).
execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE _gpu_rc OUTPUT_VARIABLE _gpu_list
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(_gpu_found OFF)
if(_gpu_rc EQUAL 0 AND _gpu_list)
  set(_gpu_found ON)
endif()
moescope_detected(GPU _gpu_found "${_gpu_list}"
  "no NVIDIA GPU answers (nvidia-smi -L): the GPU suites are registered as skipped")

find_package(GTest QUIET)
find_package(benchmark QUIET)
find_program(MOESCOPE_XVFB_RUN xvfb-run)
moescope_detected(XVFB MOESCOPE_XVFB_RUN "${MOESCOPE_XVFB_RUN}: the viewer's screenshot tests run"
  "no xvfb-run (apt-get install xvfb): the viewer's screenshot tests are skipped")

# torch.__version__ of the build's Python (the whole string, with its +cu tag) into `out`: the
# torch-linked libraries write it beside themselves so that the Python loader refuses another
# torch (C++ ABI) before loading them. Unreadable: `out` is empty and `warning` is shown.
function(moescope_python_torch_version out warning)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.__version__)"
                  OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR version STREQUAL "")
    message(WARNING "${warning}")
    set(version "")
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()
