# The GPU check's judgements as CTest tests (tests/gpu/README.md), so that tests/gpu_check.sh
# only orchestrates and CTest judges. stages/CMakeLists.txt calls these for each stage.
#
#   memcheck.stageNN, racecheck.stageNN     label "sanitizer": the kernel, slot and matmul tests
#                                           under compute-sanitizer (registered where it is found)
#   registers.stage03, registers.stage04    label "registers": the registers of stage 03's
#                                           attention and stage 04's row kernels and AdamW for
#                                           sm_80 and sm_90, failing on a spill
#                                           (gpt_add_register_check; runs without a GPU)
#   registers.spill_is_found                the same check on a kernel that must spill
#                                           (tests/gpu/register_spill_example.cu): it must fail
#   workshop.expect.<exercise>              label "workshop_expect", only in a workshop build
#                                           configured with GPT_WORKSHOP_EXPECT=ON: every test
#                                           of the exercise fails with its stub, naming it, in
#                                           its test program test_<exercise>

find_program(GPT_COMPUTE_SANITIZER compute-sanitizer
             HINTS ${CUDAToolkit_BIN_DIR} $ENV{CUDA_HOME}/bin /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer
             DOC "compute-sanitizer, for the memcheck and racecheck tests")
option(GPT_WORKSHOP_EXPECT "In a workshop build, add tests that each exercise's tests fail with its stub" OFF)

# What the GPU tests unset (ENVIRONMENT_MODIFICATION), so that they do not depend on the shell
# they run in: a launcher's variables left set (torchrun's, Open MPI's, PMI's, Slurm's: every one
# that common/dist/group.cpp reads would make a trainer or a test expect other processes, and
# OneProcessTrainsAsWithoutParallel asserts a world of one), the meeting point and the forced
# failures of stage 06's own tests, and NCCL's debug output (on stderr, where
# tests/gpu/failure_on_one_gpu.sh expects exactly one line). tests/gpu/ctest_plan.py checks that
# this list holds every variable group.cpp reads.
set(GPT_TEST_ENVIRONMENT_UNSET "")
foreach(var WORLD_SIZE RANK LOCAL_RANK LOCAL_WORLD_SIZE TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE
            MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_RANK
            PMI_SIZE PMI_RANK PMIX_RANK MPI_LOCALRANKID SLURM_PROCID SLURM_LOCALID SLURM_STEP_NUM_TASKS
            SLURM_NTASKS GPT_INIT_FILE GPT_INIT_ADDR GPT_INIT_TIMEOUT GPT_TEST_FAIL
            NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE)
  list(APPEND GPT_TEST_ENVIRONMENT_UNSET "${var}=unset:")
endforeach()

# The tests that run under the sanitizers: every test of small kernels. Model.* trains a model
# and would take many minutes under racecheck.
# Kernels.AttentionLongSequences (T = 2048 and 4096), Kernels.AttentionBenchmarkVariants (three
# more attention ops at T up to 1024) and Kernels.AttentionForwardWithoutTensorCores (a forward
# with about 64 times the shared-memory instructions of the stage's) would take minutes under
# racecheck; the stage's own kernels run under it in the other attention tests, at T up to 1024.
set(GPT_SANITIZED_TESTS
    "Kernels.*:Slots.*:Matmul.*-Kernels.AttentionLongSequences:Kernels.AttentionBenchmarkVariants:Kernels.AttentionForwardWithoutTensorCores")

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
      ENVIRONMENT_MODIFICATION "${GPT_TEST_ENVIRONMENT_UNSET}"
      # No test ran (a filter that matches nothing) is a failure, not a clean run.
      FAIL_REGULAR_EXPRESSION "0 tests from 0 test suites ran"
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endforeach()
endfunction()

# gpt_add_register_check(<name> <what>): registers.<what>, the CTest test of tests/gpu/<name>.cu,
# a file that instantiates the stage's register-heavy kernels: tests/gpu/register_check.py
# compiles it for sm_80 and sm_90 (the architectures the kernels are written for, whatever GPU
# the build is for) with the build's own flags, prints each kernel's registers beside the most it
# may use, and fails on a spill or any other use of local memory. A test, not a dependency of the
# stage's targets: a ptxas that spills a few bytes (another CUDA version) must not keep anyone
# from building and training the stage; CI and the GPU check run it (label "registers"). The
# OBJECT library, never built by default, gives the file its compile command
# (compile_commands.json). flash_attention_registers: stage 03's attention; row_kernel_registers:
# stage 04's LayerNorm and AdamW.
# With EXPECT_SPILL the test passes when the check fails on a spill (registers.spill_is_found).
function(gpt_add_register_check name what)
  cmake_parse_arguments(PARSE_ARGV 2 arg "EXPECT_SPILL" "" "")
  if(NOT Python3_Interpreter_FOUND)
    message(STATUS "registers.${what} not added: no Python 3 found")
    return()
  endif()
  if(NOT TARGET ${name})
    add_library(${name} OBJECT EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/tests/gpu/${name}.cu)
    set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "80;90")
    target_link_libraries(${name} PRIVATE gpt_cuda)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  endif()
  add_test(NAME registers.${what}
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/gpu/register_check.py
                   --compile-commands ${CMAKE_BINARY_DIR}/compile_commands.json
                   --source ${PROJECT_SOURCE_DIR}/tests/gpu/${name}.cu --arch 80 --arch 90)
  set_tests_properties(registers.${what} PROPERTIES LABELS "registers" TIMEOUT 300)
  if(arg_EXPECT_SPILL)
    set_tests_properties(registers.${what} PROPERTIES PASS_REGULAR_EXPRESSION "FAIL: local memory in")
  endif()
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

# gpt_add_workshop_expectation(<NN> <exercise> <test program target> <test prefix> <ctest names of its tests>)
function(gpt_add_workshop_expectation num exercise target prefix tests)
  if(NOT GPT_WORKSHOP OR NOT GPT_WORKSHOP_EXPECT)
    return()
  endif()
  # The GoogleTest names (Suite.Test) of the CTest tests <prefix>.Suite.Test.
  string(REPLACE "." "\\." prefix_regex "${prefix}")
  list(TRANSFORM tests REPLACE "^${prefix_regex}\\." "")
  string(REPLACE ";" ":" filter "${tests}")
  set(name workshop.expect.${exercise})
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:${target}> -DFILTER=${filter}
                   -DEXERCISE=${exercise} -P ${PROJECT_SOURCE_DIR}/tests/workshop/expect_exercise.cmake)
  set_tests_properties(${name} PROPERTIES
    LABELS "gpu;stage${num};workshop_expect"
    TIMEOUT 600
    ENVIRONMENT "GPT_DATA_DIR=${GPT_DATA_DIR};GPT_TEST_OUT=${GPT_TEST_OUT};GPT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    ENVIRONMENT_MODIFICATION "${GPT_TEST_ENVIRONMENT_UNSET}"
    SKIP_REGULAR_EXPRESSION "exercise tests skipped")
endfunction()
