# HellaSwag on the CPU trainer (train/eval_hellaswag.h), on small files made here
# (tests/tools/make_hellaswag_inputs.cpp): examples whose right ending is English and whose wrong
# ones are random letters.
#   1. alone, on a model at its initialisation, from JSON Lines: about one in four right;
#   2. during training, from llm.c's binary format: the accuracy rises, and goes to the log;
#   3. alone on the saved weights, from JSON Lines: exactly the accuracy the run logged last;
#   4. alone without --seq, rows as long as the model's context: not limited by the training's --seq;
#   5. broken files and options: one clear line each, whose advice the model accepts.
#   cmake -DMAKE_INPUTS=<make_hellaswag_inputs> -DTRAIN=<train> -DDATA=<data dir> -DOUT=<scratch> -P hellaswag_eval.cmake
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${MAKE_INPUTS}" "${DATA}/brown/brown.txt" "${DATA}/gpt2" "${OUT}" 32
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_hellaswag_inputs failed (${rc}):\n${out}${err}")
endif()
set(common --model micro --data "${DATA}/brown" --tokenizer "${DATA}/gpt2")

# run(<name> <args>...): runs the trainer, fails the test unless it succeeds; its output in ${name}.
function(run name)
  execute_process(COMMAND "${TRAIN}" ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train ${ARGN} failed (${rc}):\n${out}${err}")
  endif()
  set(${name} "${out}" PARENT_SCOPE)
endfunction()
# accuracy(<var> <text>): the last "hellaswag ... 0.1234" of a trainer's output.
function(accuracy var text)
  string(REGEX MATCHALL "hellaswag +(accuracy )?[0-9.]+" all "${text}")
  list(GET all -1 last)
  string(REGEX REPLACE ".* " "" last "${last}")
  set(${var} "${last}" PARENT_SCOPE)
endfunction()

run(alone --eval "${OUT}/learnable.jsonl")
accuracy(at_init "${alone}")
if(NOT alone MATCHES "32 examples" OR at_init GREATER 0.5)
  message(FATAL_ERROR "a model at its initialisation should be about one in four right:\n${alone}")
endif()

run(trained --eval "${OUT}/learnable.bin" --eval-every 10 --steps 20 --val-every 0 --sample-every 0
            --save "${OUT}/model.ckpt" --log "${OUT}/log.jsonl")
accuracy(after "${trained}")
if(NOT trained MATCHES "step +10 \\| hellaswag" OR NOT trained MATCHES "step +20 \\| hellaswag" OR after LESS 0.9)
  message(FATAL_ERROR "the accuracy should rise to 0.9 or more in 20 steps (from ${at_init}):\n${trained}")
endif()
string(REGEX MATCH "step +20 \\| hellaswag [0-9.]+ \\(([0-9]+) of 32" _ "${trained}")
set(right "${CMAKE_MATCH_1}")
file(STRINGS "${OUT}/log.jsonl" logged REGEX "\"type\": \"hellaswag\"")
list(LENGTH logged n)
if(NOT n EQUAL 2 OR NOT logged MATCHES "\"step\": 19, \"accuracy\": [0-9.e-]+, \"correct\": ${right}, \"examples\": 32")
  message(FATAL_ERROR "the log should hold both evaluations, the last at step 19 with ${right} of 32 right:\n${logged}")
endif()

run(saved --init "${OUT}/model.ckpt" --eval "${OUT}/learnable.jsonl")
accuracy(again "${saved}")
if(NOT again STREQUAL after)
  message(FATAL_ERROR "the saved weights, from JSON Lines, give ${again}; the run logged ${after} from llm.c's file:\n${saved}")
endif()

# mid.jsonl's 4th example is about 80 tokens long: more than the CPU trainer's default --seq 64,
# within tiny's context of 128; an evaluation alone without --seq takes it (the last --model wins).
run(mid --model tiny --eval "${OUT}/mid.jsonl")
if(NOT mid MATCHES "4 examples" OR NOT mid MATCHES "hellaswag  accuracy")
  message(FATAL_ERROR "tiny's context holds every example of mid.jsonl:\n${mid}")
endif()

# expect_error(<text the error must hold> <args>...): the error in ${error}.
function(expect_error expected)
  execute_process(COMMAND "${TRAIN}" ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${err}" err)
  string(FIND "${err}" "${expected}" at)
  if(rc EQUAL 0 OR at EQUAL -1 OR err MATCHES "\n")
    message(FATAL_ERROR "train ${ARGN}: expected one line of error with '${expected}', got (exit ${rc}):\n${err}")
  endif()
  message(STATUS "ok: ${err}")
  set(error "${err}" PARENT_SCOPE)
endfunction()
expect_error("bad magic" --eval "${OUT}/bad_magic.bin")
expect_error("truncated" --eval "${OUT}/truncated.bin")
expect_error("5 endings; 1 to 4 are possible" --eval "${OUT}/five_endings.jsonl")
# Too long for micro's context of 64: no --seq can help, given or not.
string(CONCAT beyond_context "longer than the model's context of 64 allows (65); use a model with a longer "
                             "context, or --eval-examples 32 to stop before it")
expect_error("${beyond_context}" --eval "${OUT}/long.jsonl")
set(first "${error}")
expect_error("${beyond_context}" --eval "${OUT}/long.jsonl" --seq 32)
if("${first}${error}" MATCHES "--seq [0-9]+ or more")
  message(FATAL_ERROR "no --seq holds this example in micro's context:\n${first}\n${error}")
endif()
# A --seq given is honoured, and the --seq advised is one tiny's context of 128 holds.
expect_error("longer than --seq 70 allows (71); use --seq" --model tiny --seq 70 --eval "${OUT}/mid.jsonl")
string(REGEX MATCH "use --seq ([0-9]+) or more, or --eval-examples 3 to stop before it" advice "${error}")
if(NOT advice OR CMAKE_MATCH_1 GREATER 128)
  message(FATAL_ERROR "the advice should be a --seq of at most 128, or --eval-examples 3:\n${error}")
endif()
expect_error("--seq 200 is longer than the model's context (128" --model tiny --seq 200 --eval "${OUT}/mid.jsonl")
expect_error("--eval-every 5 needs --eval FILE" --eval-every 5)
expect_error("not found" --eval "${OUT}/missing.bin")
message(STATUS "ok: HellaSwag from ${at_init} at initialisation to ${after} after 20 steps, the same from both formats")
