# CUDA toolkit, architectures and the GPU libraries every stage may link.
#
# Architectures: the local GPU's when one is visible, otherwise Ampere and Hopper; each stage is
# then built for those of them it runs on (gpt_stage_cuda_architectures below).
set(GPT_CUDA_OLDEST_ARCH 75)  # the oldest GPUs CUDA 13 builds for (Turing: T4, RTX 20xx)

# Sets <out> to a note for a machine where no NVIDIA GPU is visible (<nvidia_smi> is the program's
# path, empty where there is none; it lists no GPU), else to "". Not an error: CI builds the GPU
# presets without a GPU, and so may anyone who builds for another machine.
function(gpt_no_gpu_note nvidia_smi out)
  set(_why "nvidia-smi not found")
  if(nvidia_smi)
    execute_process(COMMAND ${nvidia_smi} -L OUTPUT_VARIABLE _list RESULT_VARIABLE _rc ERROR_QUIET TIMEOUT 60)
    if(_rc EQUAL 0 AND _list MATCHES "(^|\n)GPU [0-9]+:")
      set(${out} "" PARENT_SCOPE)
      return()
    endif()
    set(_why "nvidia-smi -L lists no GPU")
  endif()
  string(CONCAT _note "No NVIDIA GPU is visible on this machine (${_why}). The build works, but "
         "the trainers and GPU tests it builds need a GPU: here a trainer stops with 'no CUDA device "
         "found' and the GPU tests report skipped. To train on this machine's CPU: cmake --preset cpu && ./train")
  set(${out} "${_note}" PARENT_SCOPE)
endfunction()
if(CMAKE_SCRIPT_MODE_FILE)  # tests/cpu/no_gpu_note.cmake includes this file for the function above
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(_arch "80;90")
  unset(GPT_LOCAL_GPU CACHE)  # found again below, or not at all
  unset(GPT_LOCAL_GPU_ARCH CACHE)
  find_program(_nvidia_smi nvidia-smi)
  if(_nvidia_smi)
    execute_process(COMMAND ${_nvidia_smi} --query-gpu=compute_cap,name --format=csv,noheader
                    OUTPUT_VARIABLE _gpu RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rc EQUAL 0 AND _gpu MATCHES "^([0-9]+)\\.([0-9]+), *([^\n]*)")
      set(_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      # Remembered for the stages' messages: this GPU is what the trainers will run on.
      set(GPT_LOCAL_GPU "${CMAKE_MATCH_3} (sm_${_arch})" CACHE INTERNAL "the GPU nvidia-smi reports")
      set(GPT_LOCAL_GPU_ARCH ${_arch} CACHE INTERNAL "its compute capability")
      if(_arch LESS GPT_CUDA_OLDEST_ARCH)
        message(WARNING "This machine's GPU, ${GPT_LOCAL_GPU}, is older than CUDA 13 builds for (compute "
                        "capability 7.5, Turing): no stage runs on it. The stages are built for sm_75 and newer.")
        set(_arch ${GPT_CUDA_OLDEST_ARCH})
      endif()
    endif()
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${_arch}" CACHE STRING "CUDA architectures (detected)")
endif()
if(GPT_LOCAL_GPU)
  message(STATUS "CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES} (this machine's GPU: ${GPT_LOCAL_GPU})")
else()
  message(STATUS "CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")
  # No GPU visible: said now, not by ./train after minutes of building.
  find_program(_nvidia_smi nvidia-smi)
  gpt_no_gpu_note("${_nvidia_smi}" _note)
  if(_note)
    message(WARNING "${_note}")
  endif()
endif()

# The compute capability stage <dir> needs, as 75 or 80: kMinComputeCapability in its stage.cuh,
# or, where it does not set it, in the stage before it (each stage derives from the one before).
function(gpt_stage_min_arch stages_dir dir out)
  file(GLOB _dirs RELATIVE ${stages_dir} ${stages_dir}/[0-9][0-9]_*)
  list(SORT _dirs)
  set(_need "")
  foreach(_d ${_dirs})
    file(STRINGS ${stages_dir}/${_d}/stage.cuh _line REGEX "kMinComputeCapability = [0-9]+")
    if(_line MATCHES "kMinComputeCapability = ([0-9]+)")
      set(_need ${CMAKE_MATCH_1})
    endif()
    if(_d STREQUAL dir)
      break()
    endif()
  endforeach()
  if(NOT _need)
    message(FATAL_ERROR "stage ${dir}: no kMinComputeCapability in its stage.cuh or an earlier stage's")
  endif()
  set(${out} ${_need} PARENT_SCOPE)
endfunction()

# The architectures stage <dir> is built for: those of CMAKE_CUDA_ARCHITECTURES it runs on (names
# without a number, such as "native", are kept); none left, the oldest it runs on. On a T4 the
# stages from 01 on are thus built for sm_80: they compile (their tensor-core instructions do
# not exist on sm_75) and their trainers refuse the GPU with one line that points at stage 00.
# Sets <out> to the list and <need_out> to what the stage needs (75 for 7.5).
function(gpt_stage_cuda_architectures stages_dir dir out need_out)
  gpt_stage_min_arch(${stages_dir} ${dir} _need)
  set(_kept "")
  foreach(_a ${CMAKE_CUDA_ARCHITECTURES})
    if(NOT _a MATCHES "^([0-9]+)" OR CMAKE_MATCH_1 GREATER_EQUAL _need)
      list(APPEND _kept ${_a})
    endif()
  endforeach()
  if(NOT _kept)
    set(_kept ${_need})
  endif()
  set(${out} "${_kept}" PARENT_SCOPE)
  set(${need_out} ${_need} PARENT_SCOPE)
endfunction()

# "8.0" for 80.
function(gpt_compute_capability_name arch out)
  math(EXPR _major "${arch} / 10")
  math(EXPR _minor "${arch} % 10")
  set(${out} "${_major}.${_minor}" PARENT_SCOPE)
endfunction()

# One message about the stages that are not built for all of CMAKE_CUDA_ARCHITECTURES, given as
# three lists: their numbers, what each needs, the architectures each is built for (comma-joined).
# A warning for those this machine's GPU cannot run, a status line for the others.
function(gpt_report_stage_architectures nums needs archs)
  set(_refused "")
  set(_refused_archs "")
  set(_raised "")
  set(_refused_need 1000)  # the least that the refused stages need: each needs that or more
  foreach(_num _need _arch IN ZIP_LISTS nums needs archs)
    if(DEFINED GPT_LOCAL_GPU_ARCH AND GPT_LOCAL_GPU_ARCH LESS _need)
      list(APPEND _refused "${_num}")
      list(APPEND _refused_archs "sm_${_arch}")
      if(_need LESS _refused_need)
        set(_refused_need ${_need})
      endif()
    else()
      list(APPEND _raised "${_num} (${_arch})")
    endif()
  endforeach()
  if(_refused)
    list(LENGTH _refused _count)
    list(JOIN _refused ", " _refused)
    list(REMOVE_DUPLICATES _refused_archs)
    list(JOIN _refused_archs " or " _refused_arch)
    gpt_compute_capability_name(${_refused_need} _need_name)
    if(_count EQUAL 1)
      set(_stages "stage ${_refused}: it needs")
      set(_built "It is built for ${_refused_arch}, and its trainer and tests")
    else()
      set(_stages "stages ${_refused}: they need")
      set(_built "They are built for ${_refused_arch}, and their trainers and tests")
    endif()
    set(_runs "")
    if(GPT_LOCAL_GPU_ARCH GREATER_EQUAL GPT_CUDA_OLDEST_ARCH)
      set(_runs " Stage 00 runs on this GPU: cmake --preset stage00 && ./train")
    endif()
    message(WARNING "This machine's GPU, ${GPT_LOCAL_GPU}, cannot run ${_stages} compute capability "
                    "${_need_name} or newer. ${_built} will refuse this GPU.${_runs}")
  endif()
  if(_raised)
    list(JOIN _raised ", " _raised)
    message(STATUS "CUDA architectures of stage ${_raised}: CMAKE_CUDA_ARCHITECTURES less those older than "
                   "the stage runs on (kMinComputeCapability in its stage.cuh)")
  endif()
endfunction()

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
