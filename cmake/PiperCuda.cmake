# The optional CUDA build: the CUDA backend (engine/cuda) and the NCCL communicator
# (engine/comm/nccl). PIPER_CUDA=AUTO (the default) builds them when nvcc is found,
# as CMAKE_CUDA_COMPILER, CUDACXX, on PATH or at /usr/local/cuda/bin/nvcc (where the
# toolkit lives here and in CI, off PATH); ON requires it; OFF skips it.
#
# Sets PIPER_HAVE_CUDA, and when it is true the imported targets piper::nccl and
# piper::cudnn beside CUDAToolkit's CUDA::cudart and CUDA::cublasLt, and piper::cudnn_frontend
# when its headers are there.
# An executable that may load the CUDA plugin (engine/CMakeLists.txt): it exports its symbols,
# which the plugin resolves the engine's from, finds the plugin through its run path, and
# builds it. Without CUDA, nothing. The whole engine archive is linked in, not only the
# objects the executable itself calls: the plugin needs some (host staging) that a tool
# without a Session, such as piper_conformance, would otherwise leave out.
function(piper_loads_cuda_plugin target)
  if(TARGET piper_cuda)
    set_target_properties(${target} PROPERTIES ENABLE_EXPORTS ON
                                               LINK_LIBRARY_OVERRIDE_piper_engine WHOLE_ARCHIVE
                                               BUILD_RPATH "$<TARGET_FILE_DIR:piper_cuda>")
    add_dependencies(${target} piper_cuda)
    add_test(NAME build.${target}_resolves_the_cuda_plugin
             COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DPLUGIN=$<TARGET_FILE:piper_cuda>
                     -DLOADER=$<TARGET_FILE:${target}> -P ${PROJECT_SOURCE_DIR}/cmake/CheckPluginSymbols.cmake)
  endif()
endfunction()

set(PIPER_CUDA AUTO CACHE STRING "Build the CUDA backend and NCCL communicator: AUTO, ON or OFF")
set_property(CACHE PIPER_CUDA PROPERTY STRINGS AUTO ON OFF)
set(PIPER_HAVE_CUDA OFF)
if(PIPER_CUDA STREQUAL "OFF")
  return()
endif()

if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(PIPER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PIPER_CUDA=ON but no nvcc was found; set CMAKE_CUDA_COMPILER or use "
                        "PIPER_CUDA=AUTO/OFF")
  endif()
  message(STATUS "CUDA backend: off (no nvcc; PIPER_CUDA=${PIPER_CUDA})")
  return()
endif()

# Hopper (sm_90 machine code) plus compute_90 PTX, which newer GPUs compile at load time.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# The shared runtime, as CUDA::cudart: one copy of the runtime's state per process.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

find_library(PIPER_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
find_path(PIPER_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(PIPER_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
find_path(PIPER_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(NOT PIPER_NCCL_LIBRARY OR NOT PIPER_NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "CUDA ${CUDAToolkit_VERSION} found without NCCL (libnccl, nccl.h); install "
                      "it beside the toolkit or configure with -DPIPER_CUDA=OFF")
endif()
add_library(piper::nccl UNKNOWN IMPORTED)
set_target_properties(piper::nccl PROPERTIES IMPORTED_LOCATION ${PIPER_NCCL_LIBRARY}
                                             INTERFACE_INCLUDE_DIRECTORIES ${PIPER_NCCL_INCLUDE_DIR})
if(PIPER_CUDNN_LIBRARY AND PIPER_CUDNN_INCLUDE_DIR)
  add_library(piper::cudnn UNKNOWN IMPORTED)
  set_target_properties(piper::cudnn PROPERTIES IMPORTED_LOCATION ${PIPER_CUDNN_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${PIPER_CUDNN_INCLUDE_DIR})
endif()

# NVIDIA's cudnn-frontend (header-only C++, fetched by tools/fetch-cudnn-frontend.sh into
# third_party/) builds cuDNN's fused attention (engine/cuda/cudnn_attention.cc). The frontend
# loads cuDNN itself at run time, so nothing links libcudnn and plans run where it is missing.
find_path(PIPER_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
          HINTS ${PROJECT_SOURCE_DIR}/third_party/cudnn-frontend/include NO_DEFAULT_PATH)
if(PIPER_CUDNN_FRONTEND_INCLUDE_DIR AND PIPER_CUDNN_INCLUDE_DIR)
  add_library(piper::cudnn_frontend INTERFACE IMPORTED)
  # System headers (imported targets' are): the frontend's own warnings are not ours to fix.
  set_target_properties(
    piper::cudnn_frontend
    PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
               "${PIPER_CUDNN_FRONTEND_INCLUDE_DIR};${PIPER_CUDNN_INCLUDE_DIR}"
               INTERFACE_COMPILE_DEFINITIONS
               "NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING;CUDNN_FRONTEND_SKIP_JSON_LIB"
               INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
  message(STATUS "cuDNN fused attention: on (cudnn-frontend ${PIPER_CUDNN_FRONTEND_INCLUDE_DIR})")
else()
  message(STATUS "cuDNN fused attention: off (no cudnn-frontend; run tools/fetch-cudnn-frontend.sh)")
endif()

# nvcc gets the host compiler's warnings through -Xcompiler, and its own as errors too;
# kernels take __device__ lambdas.
add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra;--extended-lambda>")
if(PIPER_WERROR)
  add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings;-Xcompiler=-Werror>")
endif()
set(PIPER_HAVE_CUDA ON)
message(STATUS "CUDA backend: on (CUDA ${CUDAToolkit_VERSION}, architectures "
               "${CMAKE_CUDA_ARCHITECTURES}, NCCL ${PIPER_NCCL_LIBRARY})")
