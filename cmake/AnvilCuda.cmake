# Decides whether the CUDA backend is built (ANVIL_WITH_CUDA) and sets CUDA up when it is.
#   ANVIL_CUDA=AUTO  build it when nvcc exists (looked for on PATH and in /usr/local/cuda)
#   ANVIL_CUDA=ON    require it
#   ANVIL_CUDA=OFF   CPU only
# Architectures default to sm_80 and sm_90 plus PTX for newer GPUs; override with
# -DCMAKE_CUDA_ARCHITECTURES=... (e.g. 90 for a quick build on an H100/H200).
set(ANVIL_WITH_CUDA OFF)
if(NOT ANVIL_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(ANVIL_WITH_CUDA ON)
  elseif(ANVIL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ANVIL_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

if(ANVIL_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  # C++20 for .cu files. CMake 3.25 predates nvcc's C++20 support and knows no flag for it;
  # nvcc 12+ takes the same one as the host compiler.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  endif()
  message(STATUS "Anvil: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "Anvil: CUDA backend OFF")
endif()
