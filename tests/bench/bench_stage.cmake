# bench_stageNN: the kernel benchmark of one stage, built like test_stageNN (tests/bench/README.md,
# "The kernel benchmark"): tests/bench/kernel_bench.cuh compiled with the stage's policy.
# gpt_add_stage_bench(<NN>) is called by stages/CMakeLists.txt with GPT_STAGE_HEADER and
# GPT_STAGE_TYPE set for the stage. A benchmark, not a test: it is not registered with CTest.
# The executable goes next to test_stageNN and the trainers: <build>/stages/bench_stageNN.
function(gpt_add_stage_bench num)
  # Variants that only the benchmark builds: stage 00's first versions of its row kernels and GELU (where
  # the stage still runs stage 00's op), from stage 03 on the attention's, from stage 04 on the
  # fused classifier's.
  set(GPT_BENCH_VARIANTS "#include \"bench/first_versions.cuh\"")
  if(num GREATER_EQUAL 3)
    string(APPEND GPT_BENCH_VARIANTS "\n#include \"bench/attention_variants.cuh\"")
  endif()
  if(num GREATER_EQUAL 4)
    string(APPEND GPT_BENCH_VARIANTS "\n#include \"bench/classifier_variants.cuh\"")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/tests/bench/bench_stage.cu.in ${CMAKE_CURRENT_BINARY_DIR}/bench_stage${num}.cu
                 @ONLY)
  add_executable(bench_stage${num} ${CMAKE_CURRENT_BINARY_DIR}/bench_stage${num}.cu)
  target_link_libraries(bench_stage${num} PRIVATE gpt_cuda)
  if(num GREATER_EQUAL 6)
    target_link_libraries(bench_stage${num} PRIVATE gpt_nccl)
  endif()
  target_include_directories(bench_stage${num} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
endfunction()
