# A run of 8 steps straight, and the same run stopped after step 4 and resumed, must agree bit for
# bit: the same loss, gradient norm, validation loss and sampled text at every step, and the same
# final checkpoint, byte for byte. The halves use other thread counts than the straight run, so
# the CPU results must not depend on them either.
#   cmake -DTRAIN=<train> -DDATA=<dir> -DOUT=<dir> -P resume_exact.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(run ${TRAIN} --model micro --data ${DATA} --batch 2 --seq 16 --steps 8 --warmup 2 --lr 1e-2
    --val-every 3 --val-batches 1 --sample-every 3 --sample-tokens 6)

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

function(train log)
  gpt_run(${log} ${run} --log ${OUT}/${log}.jsonl ${ARGN})
  set(stdout_${log} "${stdout_${log}}" PARENT_SCOPE)  # to the script's scope
endfunction()

# What must agree: step, validation and sample events, without the timings.
function(events log out_var)
  gpt_log_events(${OUT}/${log}.jsonl kept step val sample)
  set(${out_var} "${kept}" PARENT_SCOPE)
endfunction()

train(straight --save ${OUT}/straight.ckpt --threads 2)
train(first_half --save ${OUT}/split.ckpt --stop-after 4 --threads 1)
if(NOT stdout_first_half MATCHES "stopped    after step 4 of 8")
  message(FATAL_ERROR "--stop-after 4 did not say where it stopped:\n${stdout_first_half}")
endif()
train(second_half --resume ${OUT}/split.ckpt --save ${OUT}/split.ckpt --threads 3)

events(straight straight)
events(first_half first)
events(second_half second)
set(split ${first} ${second})
list(LENGTH straight n_straight)
list(LENGTH split n_split)
if(NOT n_straight EQUAL n_split OR n_straight LESS 8)
  message(FATAL_ERROR "the straight run logged ${n_straight} events, the split run ${n_split}")
endif()
foreach(i RANGE 0 ${n_straight})
  if(i EQUAL n_straight)
    break()
  endif()
  list(GET straight ${i} a)
  list(GET split ${i} b)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "the resumed run differs from the straight run:\n  straight: ${a}\n  resumed:  ${b}")
  endif()
endforeach()

file(SHA256 ${OUT}/straight.ckpt a)
file(SHA256 ${OUT}/split.ckpt b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "the final checkpoints differ: ${OUT}/straight.ckpt and ${OUT}/split.ckpt")
endif()

# Resuming a finished run says so and does nothing.
train(again --resume ${OUT}/split.ckpt --threads 1)
if(NOT stdout_again MATCHES "has already taken all 8 steps")
  message(FATAL_ERROR "resuming a finished run did not say so:\n${stdout_again}")
endif()
message(STATUS "ok: ${n_straight} events and the final checkpoint identical after a resume at step 4")
