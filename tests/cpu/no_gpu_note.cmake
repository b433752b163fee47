# A GPU configure on a machine without a visible NVIDIA GPU says so up front, in one warning,
# rather than ./train after minutes of building (gpt_no_gpu_note in common/cmake/cuda.cmake).
# nvidia-smi is absent or faked, so no GPU, driver or CUDA toolkit is needed.
#   cmake -DSOURCE=<repository> -DOUT=<scratch dir> -P no_gpu_note.cmake
include(${SOURCE}/common/cmake/cuda.cmake)  # in a script, the function alone
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(failures "")

# check(<case> <nvidia-smi's output> <its exit status> <regex the note must match, or "" for none>)
function(check case output status expected)
  set(program "")
  if(NOT case STREQUAL "absent")
    set(program ${OUT}/${case}/nvidia-smi)
    file(WRITE ${OUT}/${case}/list.txt "${output}\n")
    file(WRITE ${program} "#!/bin/sh\n[ \"$1\" = -L ] || exit 2\ncat '${OUT}/${case}/list.txt'\nexit ${status}\n")
    file(CHMOD ${program} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
  endif()
  gpt_no_gpu_note("${program}" note)
  if(expected STREQUAL "" AND NOT note STREQUAL "")
    list(APPEND failures "${case}: a note where a GPU is listed: ${note}")
  elseif(NOT expected STREQUAL "" AND NOT note MATCHES "${expected}")
    list(APPEND failures "${case}: the note '${note}' does not match '${expected}'")
  endif()
  set(failures "${failures}" PARENT_SCOPE)
endfunction()

set(says "^No NVIDIA GPU is visible on this machine \\(nvidia-smi [^)]+\\)\\. The build works, but the trainers and GPU tests it builds need a GPU: .* report skipped\\. To train on this machine's CPU: cmake --preset cpu && \\./train$")
check(absent "" 0 "\\(nvidia-smi not found\\)")
check(absent "" 0 "${says}")
check(no_devices "No devices were found" 6 "\\(nvidia-smi -L lists no GPU\\)")
check(no_driver "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." 9 "lists no GPU")
check(empty_list "" 0 "lists no GPU")
check(one_gpu "GPU 0: NVIDIA H200 (UUID: GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0)" 0 "")

# The configure prints it, as a warning, wherever no GPU was found for the architectures.
file(READ ${SOURCE}/common/cmake/cuda.cmake text)
if(NOT text MATCHES "\nelse\\(\\)\n  message\\(STATUS \"CUDA architectures: [^\n]*\n[^\n]*\n  find_program\\(_nvidia_smi nvidia-smi\\)\n  gpt_no_gpu_note\\(\"\\\${_nvidia_smi}\" _note\\)\n  if\\(_note\\)\n    message\\(WARNING \"\\\${_note}\"\\)")
  list(APPEND failures "common/cmake/cuda.cmake no longer warns with gpt_no_gpu_note where GPT_LOCAL_GPU is not set")
endif()

if(failures)
  list(JOIN failures "\n  " failures)
  message(FATAL_ERROR "no_gpu_note:\n  ${failures}")
endif()
message(STATUS "no_gpu_note: a note without nvidia-smi, with no GPU listed or no driver; none with a GPU")
