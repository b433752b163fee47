# A run of 8 steps straight, and the same run stopped and continued with `--resume CKPT` alone,
# must agree bit for bit: the same loss, gradient norm, validation loss and sampled text at every
# step in the one log the run writes, and the same final checkpoint, byte for byte. Stopped
# three ways: --stop-after 4; Ctrl-C (SIGINT) during step 4; and a failure at step 6 after a
# checkpoint of --save-every 4, whose log then holds a step the checkpoint does not (dropped on
# resume). Each run works in its own folder with the same relative paths, so that the options its
# checkpoint carries are the same; the parts use other thread counts than the straight run, so
# the CPU results must not depend on them either.
#   cmake -DTRAIN=<train> -DDATA=<dir> -DOUT=<dir> -P resume_exact.cmake
file(REMOVE_RECURSE ${OUT})
set(run --model micro --data ${DATA} --batch 2 --seq 16 --steps 8 --warmup 2 --lr 1e-2 --val-every 3
    --val-batches 1 --sample-every 3 --sample-tokens 6 --save run/s.ckpt --save-every 4 --log run/s.jsonl)

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

# train(FOLDER EXPECTED_RC ARGS...): the trainer in OUT/FOLDER; sets stdout_FOLDER.
function(train folder expected_rc)
  file(MAKE_DIRECTORY ${OUT}/${folder})
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${OUT}/${folder} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 300)
  if(NOT rc EQUAL expected_rc)
    message(FATAL_ERROR "${folder}: ${ARGN}\nended with ${rc}, expected ${expected_rc}:\n${err}\n${out}")
  endif()
  set(stdout_${folder} "${stdout_${folder}}${out}" PARENT_SCOPE)
endfunction()

function(expect folder pattern)
  if(NOT stdout_${folder} MATCHES "${pattern}")
    message(FATAL_ERROR "${folder} did not print '${pattern}':\n${stdout_${folder}}")
  endif()
endfunction()

# What must agree: step, validation and sample events, without the timings.
function(expect_same_run folder)
  gpt_log_events(${OUT}/straight/run/s.jsonl straight step val sample)
  gpt_log_events(${OUT}/${folder}/run/s.jsonl resumed step val sample)
  list(LENGTH straight n_straight)
  list(LENGTH resumed n_resumed)
  if(NOT n_straight EQUAL n_resumed OR n_straight LESS 8)
    message(FATAL_ERROR "${folder}: the straight run logged ${n_straight} events, the resumed run ${n_resumed}")
  endif()
  math(EXPR last "${n_straight} - 1")
  foreach(i RANGE ${last})
    list(GET straight ${i} a)
    list(GET resumed ${i} b)
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "${folder}: the resumed run differs from the straight run:\n  straight: ${a}\n  resumed:  ${b}")
    endif()
  endforeach()
  if(ARGN STREQUAL "EVENTS_ONLY")  # its checkpoint carries another spelling of a path
    message(STATUS "${folder}: ${n_straight} events identical")
    return()
  endif()
  gpt_expect_same_file(straight/run/s.ckpt ${folder}/run/s.ckpt "${folder}: the final checkpoints differ")
  message(STATUS "${folder}: ${n_straight} events and the final checkpoint identical")
endfunction()

train(straight 0 ${TRAIN} ${run} --threads 2)

# --stop-after: the line says the whole command; --resume alone continues the run (its steps,
# schedule, save path and log come from the checkpoint).
train(stop_after 0 ${TRAIN} ${run} --stop-after 4 --threads 1)
expect(stop_after "stopped    after step 4 of 8; continue with: [^\n]* --resume run/s.ckpt\n")
train(stop_after 0 ${TRAIN} --resume run/s.ckpt --threads 3)
expect(stop_after "resume     run/s.ckpt: step 4 of 8, with the options of its run\n")
expect(stop_after "log        run/s.jsonl goes on after step 4\n")
expect(stop_after "saved      run/s.ckpt \\(step 8\\)")
expect_same_run(stop_after)

# Ctrl-C during step 4: the step finishes, is saved, and the run stops (status 130, as a shell
# reports SIGINT).
train(sigint 130 ${CMAKE_COMMAND} -E env GPT_TEST_FAIL=0:4:sigint ${TRAIN} ${run} --threads 1)
expect(sigint "saved      run/s.ckpt \\(step 4\\)\nstopped    after step 4 of 8 \\(SIGINT\\); continue with: [^\n]* --resume run/s.ckpt\n")
train(sigint 0 ${TRAIN} --resume run/s.ckpt --threads 3)
expect_same_run(sigint)

# A failure at step 6: the checkpoint of step 4 stays, and the log's step 5 is dropped on resume.
train(failure 1 ${CMAKE_COMMAND} -E env GPT_TEST_FAIL=0:6 ${TRAIN} ${run} --threads 1)
train(failure 0 ${TRAIN} --resume run/s.ckpt --threads 2)
expect(failure "log        run/s.jsonl goes on after step 4 \\(1 line after the checkpoint, logged by the run before it ended, dropped\\)")
expect_same_run(failure)

# The log given again in another spelling is the same file: it goes on.
train(respelled 0 ${TRAIN} ${run} --stop-after 4 --threads 1)
train(respelled 0 ${TRAIN} --resume run/s.ckpt --log ./run/s.jsonl --threads 2)
expect(respelled "log        ./run/s.jsonl goes on after step 4\n")
expect_same_run(respelled EVENTS_ONLY)

# A resume refused (a checkpoint with its last byte changed) leaves the log as it was, the line
# of step 5 after the checkpoint of step 4 included.
train(refused 1 ${CMAKE_COMMAND} -E env GPT_TEST_FAIL=0:6 ${TRAIN} ${run} --threads 1)
file(READ ${OUT}/refused/run/s.jsonl log_before)
train(refused 0 sh -c "size=$(wc -c < run/s.ckpt) && printf x | dd of=run/s.ckpt bs=1 seek=$((size - 1)) conv=notrunc status=none")
train(refused 1 ${TRAIN} --resume run/s.ckpt --threads 1)
file(READ ${OUT}/refused/run/s.jsonl log_after)
if(NOT log_before STREQUAL log_after)
  message(FATAL_ERROR "a refused resume changed the log:\nbefore:\n${log_before}\nafter:\n${log_after}")
endif()

# An option given again that changes the run is said in one line.
train(stop_after 0 ${TRAIN} --resume run/s.ckpt --steps 9 --threads 1 --stop-after 9)
expect(stop_after "resume     --steps 9 \\(given\\) where the saved run had 8: from here on it is another run\n")

# Resuming a finished run says so and does nothing.
train(straight 0 ${TRAIN} --resume run/s.ckpt --threads 1)
expect(straight "has already taken all 8 steps")
