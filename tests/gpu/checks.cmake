# The GPU check's judgements as CTest tests (tests/gpu/README.md), so that tests/gpu_check.sh
# only orchestrates and CTest judges. stages/CMakeLists.txt calls these for each stage.
#
#   memcheck.stageNN, racecheck.stageNN     label "sanitizer": the kernel, slot and matmul tests
#                                           under compute-sanitizer (registered where it is found)
#   flash_attention_registers               not tests: build targets that fail on a register spill,
#   row_kernel_registers                    in stage 03's attention and in stage 04's LayerNorm and
#                                           AdamW (gpt_add_register_check)
#   workshop.expect.stageNN.<exercise>      label "workshop_expect", only in a workshop build
#                                           configured with GPT_WORKSHOP_EXPECT=ON: every test
#                                           of the exercise fails with the stub, naming it

find_program(GPT_COMPUTE_SANITIZER compute-sanitizer
             HINTS ${CUDAToolkit_BIN_DIR} $ENV{CUDA_HOME}/bin /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer
             DOC "compute-sanitizer, for the memcheck and racecheck tests")
option(GPT_WORKSHOP_EXPECT "In a workshop build, add tests that each exercise's tests fail with its stub" OFF)

# The tests that run under the sanitizers: every test of small kernels. Model.* trains a model
# and would take many minutes under racecheck.
# Kernels.AttentionLongSequences (T = 2048 and 4096) and Kernels.AttentionBenchmarkVariants (three
# more attention ops at T up to 1024) would take minutes under racecheck; the stage's own kernels
# run under it in the other attention tests, at T up to 1024.
set(GPT_SANITIZED_TESTS "Kernels.*:Slots.*:Matmul.*-Kernels.AttentionLongSequences:Kernels.AttentionBenchmarkVariants")

function(gpt_add_sanitizer_tests num)
  if(NOT GPT_COMPUTE_SANITIZER OR GPT_WORKSHOP)
    return()
  endif()
  foreach(tool memcheck racecheck)
    add_test(NAME ${tool}.stage${num}
             COMMAND ${GPT_COMPUTE_SANITIZER} --tool ${tool} --error-exitcode 99 --print-limit 50
                     $<TARGET_FILE:test_stage${num}> --gtest_filter=${GPT_SANITIZED_TESTS})
    set_tests_properties(${tool}.stage${num} PROPERTIES
      LABELS "sanitizer;stage${num}"
      TIMEOUT 420
      # Matmuls keep the heuristic's first algorithm: timing 8 candidates of every shape, each run
      # under the sanitizer, would take many minutes (Matmul.FastestAlgorithmMatchesTheHeuristicsFirst
      # times its own, so the timing runs under the sanitizer there).
      ENVIRONMENT "GPT_DATA_DIR=${GPT_DATA_DIR};GPT_TEST_OUT=${GPT_TEST_OUT};GPT_SOURCE_DIR=${PROJECT_SOURCE_DIR};GPT_MATMUL_TIMING=off"
      # No test ran (a filter that matches nothing) is a failure, not a clean run.
      FAIL_REGULAR_EXPRESSION "0 tests from 0 test suites ran"
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endforeach()
endfunction()

# gpt_add_register_check(<name> <targets>): tests/gpu/<name>.cu, kernels compiled with ptxas
# printing their registers and failing on a spill or other local memory, for sm_80 and sm_90 (the
# architectures the kernels are written for: the check holds in every build, CI's included,
# whatever GPU the build is for); each of <targets> (train_NN, test_stageNN, bench_stageNN)
# depends on it, so that a spill stops the stage's build. flash_attention_registers: every kernel
# of stage 03's attention; row_kernel_registers: stage 04's LayerNorm and AdamW.
function(gpt_add_register_check name)
  if(NOT TARGET ${name})
    add_library(${name} OBJECT ${PROJECT_SOURCE_DIR}/tests/gpu/${name}.cu)
    set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "80;90")
    target_link_libraries(${name} PRIVATE gpt_cuda)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v,-warn-spills,-warn-lmem-usage,-Werror>)
  endif()
  foreach(target ${ARGN})
    if(TARGET ${target})
      add_dependencies(${target} ${name})
    endif()
  endforeach()
endfunction()

# gpt_workshop_exercise_table(<stage dir> <exercises> <out var>): C++ initialisers
# {name, tests regex, docs} of a stage's exercises (as gpt_exercises lists them), for the note
# a workshop build prints when an exercise's test fails (common/testing/exercise_note.h). Empty outside workshop builds: there a failing test
# is a broken solution, not an exercise to write.
function(gpt_workshop_exercise_table dir exercises out_var)
  set(table "")
  if(GPT_WORKSHOP)
    foreach(exercise ${exercises})
      gpt_exercise_item("${exercise}" name regex)
      string(REPLACE "\\" "\\\\" regex "${regex}")
      string(REPLACE "\"" "\\\"" regex "${regex}")
      string(APPEND table "    {\"${name}\", \"${regex}\", \"docs/${dir}.md#exercise\"},\n")
    endforeach()
  endif()
  set(${out_var} "${table}" PARENT_SCOPE)
endfunction()

# gpt_add_workshop_expectation(<NN> <exercise> <ctest names of its tests>)
function(gpt_add_workshop_expectation num exercise tests)
  if(NOT GPT_WORKSHOP OR NOT GPT_WORKSHOP_EXPECT)
    return()
  endif()
  # The GoogleTest names (Suite.Test) of the CTest tests stageNN.Suite.Test.
  list(TRANSFORM tests REPLACE "^stage${num}\\." "")
  string(REPLACE ";" ":" filter "${tests}")
  set(name workshop.expect.${exercise})
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:test_stage${num}> -DFILTER=${filter}
                   -DEXERCISE=${exercise} -P ${PROJECT_SOURCE_DIR}/tests/workshop/expect_exercise.cmake)
  set_tests_properties(${name} PROPERTIES
    LABELS "gpu;stage${num};workshop_expect"
    TIMEOUT 600
    ENVIRONMENT "GPT_DATA_DIR=${GPT_DATA_DIR};GPT_TEST_OUT=${GPT_TEST_OUT};GPT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    SKIP_REGULAR_EXPRESSION "exercise tests skipped")
endfunction()
