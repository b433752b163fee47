# Text generation from a checkpoint, as README shows it: train a little, save, then
# `train --init CKPT --prompt TEXT`. The continuation goes to stdout after the prompt, the report
# to stderr; the same seed gives the same text; 80 tokens run past the micro model's context of 64.
#   cmake -DTRAIN=<train> -DDATA=<shards dir> -DTOKENIZER=<dir> -DOUT=<scratch dir> -P generate_from_checkpoint.cmake
include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")

gpt_run(train "${TRAIN}" --data "${DATA}" --tokenizer "${TOKENIZER}" --model micro --batch 4 --seq 64 --steps 3
        --val-every 0 --sample-every 0 --save "${OUT}/micro.ckpt")

set(prompt "The jury said that")
foreach(run a b)
  execute_process(COMMAND "${TRAIN}" --init "${OUT}/micro.ckpt" --tokenizer "${TOKENIZER}" --prompt "${prompt}"
                          --sample-tokens 80 --top-k 0 --seed 5
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out_${run} ERROR_VARIABLE err_${run} TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generation failed (${rc}):\n${err_${run}}\n${out_${run}}")
  endif()
endforeach()
message(STATUS "stdout:\n${out_a}\nstderr:\n${err_a}")

string(FIND "${out_a}" "${prompt}" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "stdout does not start with the prompt:\n${out_a}")
endif()
string(LENGTH "${prompt}" prompt_length)
string(LENGTH "${out_a}" out_length)
if(NOT out_length GREATER prompt_length)
  message(FATAL_ERROR "nothing after the prompt:\n${out_a}")
endif()
if(NOT err_a MATCHES "model      L=2 H=4 C=64 maxT=64 V=50257 from ${OUT}/micro.ckpt")
  message(FATAL_ERROR "stderr does not say which weights it loaded:\n${err_a}")
endif()
if(NOT err_a MATCHES "generated  [0-9]+ tokens in [0-9.]+ s")
  message(FATAL_ERROR "stderr has no 'generated' line:\n${err_a}")
endif()
if(NOT out_a STREQUAL out_b)
  message(FATAL_ERROR "the same seed gave two texts:\n${out_a}\n---\n${out_b}")
endif()
