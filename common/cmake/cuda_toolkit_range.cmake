# The CUDA toolkits the GPU stages accept: 12.0 to 13.x. README ("Prerequisites") says what
# sets each bound; only 13.0 has built the project so far.
#
# gpt_check_cuda_toolkit() runs twice in the top-level CMakeLists.txt: before
# enable_language(CUDA), on the nvcc that CMake is about to use (an nvcc too old for the
# architectures asked for would otherwise fail CMake's compiler test with pages of output
# instead of the reason), and after it, on the compiler CMake found (a no-op when it is the
# same one).
#
# Test hook: -DGPT_CUDA_VERSION_FOR_TEST=<version> stands in for nvcc's version, so that a test
# can configure with a toolkit that is not installed (tests/cpu/cuda_toolkit_range.cmake).

set(GPT_CUDA_OLDEST 12.0)      # cudaGraphInstantiate(exec, graph, flags) is CUDA 12.0's form
set(GPT_CUDA_NEWEST_MAJOR 13)  # the newest major version that has built the project
set(GPT_CUDA_RANGE "${GPT_CUDA_OLDEST} to ${GPT_CUDA_NEWEST_MAJOR}.x")

# gpt_check_cuda_version(<version> <nvcc>): stops the configure when <version> is older than
# the range; warns when its major version is newer (a new major version may remove what the
# code uses, as 12.0 and 13.0 did, but it may as well build: the compiler will tell).
# The messages start with a space so that CMake prints them on one line, unwrapped.
function(gpt_check_cuda_version version nvcc)
  set(_choose "choose another toolkit with -DCMAKE_CUDA_COMPILER=/path/to/cuda/bin/nvcc")
  if(NOT version MATCHES "^[0-9]+(\\.[0-9]+)*$")
    message(FATAL_ERROR " cannot read the CUDA version of ${nvcc} ('${version}'); this project "
                        "needs CUDA ${GPT_CUDA_RANGE}: ${_choose}")
  endif()
  if(version VERSION_LESS GPT_CUDA_OLDEST)
    message(FATAL_ERROR " CUDA ${version} (${nvcc}) is too old: this project needs CUDA "
                        "${GPT_CUDA_RANGE} (README, Prerequisites); ${_choose}")
  endif()
  string(REGEX MATCH "^[0-9]+" _major "${version}")
  if(_major GREATER GPT_CUDA_NEWEST_MAJOR)
    message(WARNING " CUDA ${version} (${nvcc}) is newer than this project has been built with "
                    "(it supports CUDA ${GPT_CUDA_RANGE}): if the build fails, ${_choose}")
  else()
    message(STATUS "CUDA toolkit: ${version} (${nvcc}), in the supported range ${GPT_CUDA_RANGE}")
  endif()
endfunction()

# The nvcc that enable_language(CUDA) will use: CMAKE_CUDA_COMPILER, else the one
# common/cmake/cuda.cmake picks (/usr/local/cuda), else CMake's own search (CUDACXX, then nvcc
# on the PATH or in $CUDA_PATH/bin). Empty when there is none.
function(_gpt_nvcc_to_be_used out)
  set(_nvcc "")
  if(CMAKE_CUDA_COMPILER)
    set(_nvcc "${CMAKE_CUDA_COMPILER}")
  elseif(EXISTS /usr/local/cuda/bin/nvcc)
    set(_nvcc /usr/local/cuda/bin/nvcc)
  elseif(NOT "$ENV{CUDACXX}" STREQUAL "")
    separate_arguments(_cudacxx NATIVE_COMMAND "$ENV{CUDACXX}")
    list(GET _cudacxx 0 _nvcc)
  endif()
  if(_nvcc AND NOT IS_ABSOLUTE "${_nvcc}")
    find_program(_gpt_nvcc_path NAMES "${_nvcc}" NO_CACHE)
    set(_nvcc "${_gpt_nvcc_path}")
  elseif(NOT _nvcc)
    find_program(_gpt_nvcc_path NAMES nvcc PATHS "$ENV{CUDA_PATH}/bin" NO_CACHE)
    set(_nvcc "${_gpt_nvcc_path}")
  endif()
  if(NOT _nvcc OR NOT EXISTS "${_nvcc}")
    set(_nvcc "")  # enable_language(CUDA) reports a missing compiler itself
  endif()
  set(${out} "${_nvcc}" PARENT_SCOPE)
endfunction()

# Call at the directory scope (it remembers there which nvcc it checked).
function(gpt_check_cuda_toolkit)
  if(DEFINED CMAKE_CUDA_COMPILER_VERSION)  # after enable_language(CUDA): what CMake found
    if(CMAKE_CUDA_COMPILER STREQUAL _gpt_cuda_checked_nvcc)
      return()
    endif()
    set(_nvcc "${CMAKE_CUDA_COMPILER}")
    set(_version "${CMAKE_CUDA_COMPILER_VERSION}")
  else()
    _gpt_nvcc_to_be_used(_nvcc)
    set(_version "")
    if(_nvcc)
      execute_process(COMMAND "${_nvcc}" --version OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
      # "Cuda compilation tools, release 13.0, V13.0.88"
      if(_out MATCHES "release [0-9.]+, V([0-9.]+)")
        set(_version "${CMAKE_MATCH_1}")
      else()
        set(_version "no version in the output of --version")
      endif()
    endif()
  endif()
  if(DEFINED GPT_CUDA_VERSION_FOR_TEST AND NOT GPT_CUDA_VERSION_FOR_TEST STREQUAL "")
    set(_version "${GPT_CUDA_VERSION_FOR_TEST}")
    if(NOT _nvcc)
      set(_nvcc "nvcc")
    endif()
  endif()
  if(_version STREQUAL "")
    return()  # no nvcc found: enable_language(CUDA) says so
  endif()
  gpt_check_cuda_version("${_version}" "${_nvcc}")
  set(_gpt_cuda_checked_nvcc "${_nvcc}" PARENT_SCOPE)
endfunction()
