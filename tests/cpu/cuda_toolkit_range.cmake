# The CUDA toolkit's version check of a GPU configure (common/cmake/cuda_toolkit_range.cmake):
# a toolkit older than 12.0 stops the configure with one line that names its version, the
# supported range and how to choose another; a major version newer than 13 warns and goes on;
# one in the range passes.
#   cmake -DSOURCE=<repository> -DOUT=<scratch dir> -P cuda_toolkit_range.cmake
# First a real configure of the stage00 preset with a faked old version (it stops before CMake
# looks at a CUDA compiler, so it needs no toolkit), then each version against the module, in a
# child `cmake -P` that runs this file again with CASE set.

if(DEFINED CASE)  # the child: one check, as the top-level CMakeLists.txt makes it
  include(${SOURCE}/common/cmake/cuda_toolkit_range.cmake)
  if(CASE STREQUAL "version")  # a version as nvcc would report it
    gpt_check_cuda_version("${VERSION}" /opt/cuda-${VERSION}/bin/nvcc)
  elseif(CASE STREQUAL "nvcc")  # before enable_language(CUDA): read from `nvcc --version`
    set(CMAKE_CUDA_COMPILER ${OUT}/nvcc)
    file(WRITE ${CMAKE_CUDA_COMPILER}
         "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release ${VERSION}, V${VERSION}.89'\n")
    file(CHMOD ${CMAKE_CUDA_COMPILER} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
    gpt_check_cuda_toolkit()
  elseif(CASE STREQUAL "found")  # after enable_language(CUDA): the version CMake found
    set(CMAKE_CUDA_COMPILER /opt/cuda-${VERSION}/bin/nvcc)
    set(CMAKE_CUDA_COMPILER_VERSION ${VERSION})
    gpt_check_cuda_toolkit()
  endif()
  return()
endif()

file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(failures "")

# expect(<what> <passes|warns|fails> <regex that one line of the output matches> <output> <rc>)
function(expect what want regex output rc)
  set(bad "")
  if(want STREQUAL "fails" AND rc EQUAL 0)
    set(bad "the check passed, expected it to stop the configure")
  elseif(NOT want STREQUAL "fails" AND NOT rc EQUAL 0)
    set(bad "the check stopped the configure (exit ${rc})")
  elseif(NOT output MATCHES "(^|\n)[^\n]*${regex}")
    set(bad "no line matches '${regex}'")
  elseif(want STREQUAL "passes" AND output MATCHES "CMake Warning")
    set(bad "it warned")
  elseif(want STREQUAL "warns" AND NOT output MATCHES "CMake Warning")
    set(bad "no warning")
  endif()
  if(bad)
    message("FAIL: ${what}: ${bad}; its output:\n${output}")
    set(failures "${failures};${what}" PARENT_SCOPE)
  else()
    message("ok: ${what}")
  endif()
endfunction()

set(refused "is too old: this project needs CUDA 12\\.0 to 13\\.x \\(README, Prerequisites\\); choose another toolkit with -DCMAKE_CUDA_COMPILER=")

# The real configure: the preset's own way in, the error's one line, and nothing of CUDA before it.
execute_process(COMMAND ${CMAKE_COMMAND} --preset stage00 -B ${OUT}/configure -DGPT_CUDA_VERSION_FOR_TEST=11.8
                WORKING_DIRECTORY ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
expect("cmake --preset stage00 with CUDA 11.8" fails "   CUDA 11\\.8 \\([^)]*\\) ${refused}" "${out}" ${rc})
if(out MATCHES "The CUDA compiler identification")
  message("FAIL: the configure with CUDA 11.8 tested the CUDA compiler before it stopped")
  list(APPEND failures "stopped early")
endif()

foreach(item
    "version|11.8|fails|CUDA 11\\.8 \\(/opt/cuda-11\\.8/bin/nvcc\\) ${refused}"
    "version|9.2|fails|CUDA 9\\.2 .* ${refused}"
    "version|12.0|passes|CUDA toolkit: 12\\.0 .*in the supported range 12\\.0 to 13\\.x"
    "version|12.9.41|passes|in the supported range"
    "version|13.0|passes|in the supported range"
    "version|13.2|passes|in the supported range"
    "version|14.0|warns|CUDA 14\\.0 \\(/opt/cuda-14\\.0/bin/nvcc\\) is newer than this project has been built with \\(it supports CUDA 12\\.0 to 13\\.x\\): if the build fails, choose another toolkit with -DCMAKE_CUDA_COMPILER="
    "version|release|fails|cannot read the CUDA version of"
    "nvcc|11.8|fails|CUDA 11\\.8\\.89 \\([^)]*/nvcc\\) ${refused}"
    "nvcc|13.0|passes|CUDA toolkit: 13\\.0\\.89 .*in the supported range"
    "found|11.8|fails|CUDA 11\\.8 \\(/opt/cuda-11\\.8/bin/nvcc\\) ${refused}"
    "found|13.0|passes|in the supported range")
  string(REPLACE "|" ";" item "${item}")
  list(GET item 0 case)
  list(GET item 1 version)
  list(GET item 2 want)
  list(GET item 3 regex)
  execute_process(COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DVERSION=${version} -DSOURCE=${SOURCE} -DOUT=${OUT}
                          -P ${CMAKE_CURRENT_LIST_FILE}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  expect("${case} ${version}" ${want} "${regex}" "${out}" ${rc})
endforeach()

if(failures)
  message(FATAL_ERROR "failed:${failures}")
endif()
