# The participant's copy (gpt_workshop_sync in common/cmake/workshop.cmake), on a small
# stages tree made here: the chosen stage is stubbed and the others are verbatim, an edit
# survives a re-sync, an untouched file follows its source, new files arrive, a deleted file
# comes back (that is how an exercise is reset), and unchanged files are not rewritten.
#
#   cmake -DWORKSHOP=<workshop.cmake> -DWORK=<scratch dir> -P copy_policy.cmake

cmake_minimum_required(VERSION 3.25)
include(${WORKSHOP})

set(src ${WORK}/stages)
set(copy ${WORK}/workshop/stages)
set(pristine ${WORK}/workshop/pristine/stages)
file(REMOVE_RECURSE ${WORK})

macro(sync stage)
  gpt_workshop_sync(SOURCE ${src} COPY ${copy} PRISTINE ${pristine} STAGE ${stage} EXERCISES exercises)
endmacro()

function(expect_file path expected what)
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "${what}: ${path} is missing")
  endif()
  file(READ ${path} got)
  if(NOT got STREQUAL expected)
    message(FATAL_ERROR "${what}: ${path} holds\n${got}\n--- expected:\n${expected}")
  endif()
  message(STATUS "ok: ${what}")
endfunction()

set(kernel_v1 "// v1\nvoid k() {\n    // EXERCISE BEGIN stage00.k TESTS K\\.K\n    int x = 1;\n    // EXERCISE END\n}\n")
set(stage_v1 "#include \"../00_a/k.cuh\"\nstruct Stage01 {};\n")
file(WRITE ${src}/00_a/k.cuh "${kernel_v1}")
file(WRITE ${src}/01_b/stage.cuh "${stage_v1}")
file(WRITE ${src}/CMakeLists.txt "# the build description: not copied\n")

# 1. First sync: stage 00 stubbed, stage 01 verbatim, the build description left out.
sync(00_a)
gpt_workshop_stub_text("${kernel_v1}" k.cuh 00_a kernel_v1_stub _)
expect_file(${copy}/00_a/k.cuh "${kernel_v1_stub}" "the chosen stage is stubbed")
expect_file(${copy}/01_b/stage.cuh "${stage_v1}" "another stage is copied verbatim")
if(EXISTS ${copy}/CMakeLists.txt)
  message(FATAL_ERROR "CMakeLists.txt was copied")
endif()
if(NOT exercises STREQUAL "stage00.k|${copy}/00_a/k.cuh")
  message(FATAL_ERROR "EXERCISES: got '${exercises}'")
endif()

# 2. A re-sync with nothing changed rewrites nothing (Ninja would otherwise rebuild).
file(TIMESTAMP ${copy}/00_a/k.cuh before "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
sync(00_a)
file(TIMESTAMP ${copy}/00_a/k.cuh after "%s")
if(NOT before STREQUAL after)
  message(FATAL_ERROR "an unchanged copy was rewritten (time stamp ${before} -> ${after})")
endif()
message(STATUS "ok: an unchanged copy is not rewritten")

# 3. The participant edits the exercise; then both sources change and a file is added.
set(edited "// my solution\n")
file(WRITE ${copy}/00_a/k.cuh "${edited}")
string(REPLACE "v1" "v2" kernel_v2 "${kernel_v1}")
set(stage_v2 "${stage_v1}// v2\n")
file(WRITE ${src}/00_a/k.cuh "${kernel_v2}")
file(WRITE ${src}/01_b/stage.cuh "${stage_v2}")
file(WRITE ${src}/00_a/new.cuh "// new\n")
sync(00_a)   # prints a warning about k.cuh: expected
expect_file(${copy}/00_a/k.cuh "${edited}" "an edited file is kept when its source changes")
expect_file(${copy}/01_b/stage.cuh "${stage_v2}" "an untouched file follows its source")
expect_file(${copy}/00_a/new.cuh "// new\n" "a new source file is copied")

# 4. Reset: delete the copy and sync again.
file(REMOVE ${copy}/00_a/k.cuh)
sync(00_a)
gpt_workshop_stub_text("${kernel_v2}" k.cuh 00_a kernel_v2_stub _)
expect_file(${copy}/00_a/k.cuh "${kernel_v2_stub}" "a deleted file comes back as the current stub")

# 5. The same copy for the next stage: stage 00 (untouched) becomes the solution, and the
#    participant's own file there is left alone.
file(WRITE ${copy}/00_a/notes.txt "my notes\n")
sync(01_b)
expect_file(${copy}/00_a/k.cuh "${kernel_v2}" "an untouched stub becomes the solution when another stage is chosen")
expect_file(${copy}/00_a/notes.txt "my notes\n" "a file the participant added is left alone")
