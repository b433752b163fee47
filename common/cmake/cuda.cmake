# CUDA toolkit, architectures and the GPU libraries every stage may link.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # The local GPU's architecture when one is visible, otherwise Ampere and Hopper.
  set(_arch "80;90")
  find_program(_nvidia_smi nvidia-smi)
  if(_nvidia_smi)
    execute_process(COMMAND ${_nvidia_smi} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _cap RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rc EQUAL 0 AND _cap MATCHES "^([0-9]+)\\.([0-9]+)")
      set(_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
    endif()
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${_arch}" CACHE STRING "CUDA architectures (detected)")
endif()
message(STATUS "CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")

if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

# NCCL is not part of CUDAToolkit's imported targets. Where it is not installed with CUDA, the
# copy PyTorch's wheels bring (the nvidia-nccl package) will do; NCCL_HOME points at any other.
set(_nccl_hints $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT} /usr)
find_package(Python3 QUIET COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))"
                  OUTPUT_VARIABLE _wheel_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND _nccl_hints ${_wheel_nccl})
endif()
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ${_nccl_hints}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_nccl_hints} PATH_SUFFIXES include)
if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
  add_library(gpt_nccl INTERFACE)
  target_link_libraries(gpt_nccl INTERFACE ${NCCL_LIBRARY})
  target_include_directories(gpt_nccl INTERFACE ${NCCL_INCLUDE_DIR})
  message(STATUS "NCCL: ${NCCL_LIBRARY}")
else()
  message(STATUS "NCCL: not found (only the multi-GPU stage needs it)")
endif()
