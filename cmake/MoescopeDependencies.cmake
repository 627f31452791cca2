# Finds every dependency. Optional parts resolve AUTO to ON/OFF and set MOESCOPE_HAVE_<PART>
# and MOESCOPE_WHY_<PART> (one line: what was found, or what is missing); the configure summary
# (MoescopeSummary.cmake) prints both.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)

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

# CUDA toolkit (headers for CUPTI/NVTX are used by the profiler even without nvcc).
find_package(CUDAToolkit QUIET)
find_path(MOESCOPE_NVTX_INCLUDE_DIR nvtx3/nvToolsExt.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/local/cuda/include)
if(NOT MOESCOPE_NVTX_INCLUDE_DIR)
  message(FATAL_ERROR "The shim and the runtime need the header-only NVTX3 (nvtx3/nvToolsExt.h "
                      "from the CUDA toolkit); set MOESCOPE_NVTX_INCLUDE_DIR to its include folder")
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
if(NOT MOESCOPE_WITH_TORCH STREQUAL "OFF")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _torch_rc ERROR_QUIET)
    if(_torch_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
      # Torch's config looks for cuDNN/nvToolsExt noise we do not need; keep it quiet.
      set(CAFFE2_USE_CUDNN OFF)
      find_package(Torch QUIET)
      if(Torch_FOUND)
        set(_torch_found ON)
      endif()
    endif()
  endif()
endif()
moescope_decide(TORCH "${MOESCOPE_WITH_TORCH}" _torch_found
  "LibTorch ${Torch_VERSION} from the torch wheel: runtime, moe_train, runtime tests"
  "python3 cannot import torch (pip install torch): no runtime, moe_train or runtime tests")
if(MOESCOPE_HAVE_TORCH)
  # torch's flags carry -D_GLIBCXX_USE_CXX11_ABI; keep them on torch targets only.
  add_library(moescope_torch INTERFACE)
  target_link_libraries(moescope_torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_options(moescope_torch INTERFACE ${TORCH_CXX_FLAGS})
endif()

# Viewer: Debian's libimgui-dev (with GLFW + OpenGL3 backends inside libimgui.a) and GLFW.
pkg_check_modules(IMGUI QUIET IMPORTED_TARGET imgui)
pkg_check_modules(GLFW QUIET IMPORTED_TARGET glfw3)
find_package(OpenGL QUIET)
find_path(MOESCOPE_STB_INCLUDE_DIR stb/stb_image_write.h)
set(_viewer_missing "")
foreach(part IMGUI GLFW OpenGL MOESCOPE_STB_INCLUDE_DIR)
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
          PATHS /usr/local/cuda/include)
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
