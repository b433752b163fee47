# A run whose batch was not given fits the memory by micro-batches (train/loop.h,
# fit_default_batch): under a GPT_MEMORY_LIMIT between what the default batch of 8 needs and what
# 2 micro-batches of 4 need, the trainer splits it, says so in its banner, and trains exactly as
# an explicit --batch 4 --total-batch of the same tokens; an explicit --batch 8 is refused before
# the first step. The limit comes from the trainer's own estimates, so that the test does not
# depend on the model's sizes.
#   cmake -DTRAIN=<train> -DDATA=<dir> -DOUT=<dir> -P memory_fit.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(run ${TRAIN} --model micro --seq 16 --data ${DATA} --steps 3 --warmup 1 --val-every 0 --sample-every 0
    --threads 1)
include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

# What 8 x 16 tokens need as one micro-batch and as 2 of 4 (MiB), from the refusals under 1 MiB.
function(estimate out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env GPT_MEMORY_LIMIT=1M ${run} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(rc EQUAL 0 OR NOT err MATCHES "needs about ([0-9]+) MiB of host memory")
    message(FATAL_ERROR "expected a refusal in MiB under GPT_MEMORY_LIMIT=1M (${ARGN}):\n${err}${out}")
  endif()
  set(${out_var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()
estimate(whole --batch 8)
estimate(halves --batch 4 --total-batch 128)
math(EXPR limit "(${whole} + ${halves}) / 2")
if(NOT whole GREATER halves OR whole LESS_EQUAL limit OR halves GREATER_EQUAL limit)
  message(FATAL_ERROR "no limit lies between ${halves} and ${whole} MiB")
endif()
message(STATUS "8 sequences need ${whole} MiB, 2 micro-batches of 4 need ${halves}: GPT_MEMORY_LIMIT=${limit}M")

# The default batch (8 on the CPU) under the limit: split in two, said in one line.
gpt_run(split ${CMAKE_COMMAND} -E env GPT_MEMORY_LIMIT=${limit}M ${run} --log ${OUT}/split.jsonl)
gpt_expect_output(split "\nbatch      4 x 16 tokens x 2 micro-batches x 1 processes = 128 tokens/step")
gpt_expect_output(split "\nmemory     the default --batch 8 needs about ${whole} MiB of host memory, but ${limit} MiB is available \\(GPT_MEMORY_LIMIT\\): 2 micro-batches of 4 sequences instead, the same 128 tokens a step \\(a --batch you give is never split\\)\n")

# The same run asked for explicitly, without a limit: the same steps, loss for loss.
gpt_run(explicit ${run} --batch 4 --total-batch 128 --log ${OUT}/explicit.jsonl)
if(stdout_explicit MATCHES "\nmemory     ")
  message(FATAL_ERROR "a run that fits said it was split:\n${stdout_explicit}")
endif()
gpt_log_events(${OUT}/split.jsonl split_steps start step)
gpt_log_events(${OUT}/explicit.jsonl explicit_steps start step)
list(LENGTH split_steps n)
if(NOT n EQUAL 4 OR NOT split_steps STREQUAL explicit_steps)
  message(FATAL_ERROR "the split run did not train as --batch 4 --total-batch 128:\n${split_steps}\n---\n${explicit_steps}")
endif()

# An explicit --batch is never split: refused before anything is allocated or trained.
execute_process(COMMAND ${CMAKE_COMMAND} -E env GPT_MEMORY_LIMIT=${limit}M ${run} --batch 8
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(rc EQUAL 0 OR NOT err MATCHES "^error: --batch 8 --seq 16 of [^\n]* needs about ${whole} MiB of host memory \\([a-zA-Z, ]+\\), but ${limit} MiB is available \\(GPT_MEMORY_LIMIT\\); the largest --batch that fits is [4-7]\n$"
   OR out MATCHES "step ")
  message(FATAL_ERROR "an explicit --batch 8 was not refused in one line before training (${rc}):\n${err}${out}")
endif()
file(REMOVE_RECURSE ${OUT})
