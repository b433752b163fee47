# The CPU trainer with --profile: its table lists the model graph's ops, their sum is within 10% of
# the step's own time (on the CPU every op has finished when its call returns, so only copies,
# memsets and the loss sum lie between them), the JSON beside the log reads back, the figure is
# drawn, and the run trains exactly as it does without --profile. Output paths are checked
# before the first step.
#   cmake -DTRAIN=<train> -DDATA=<dir> -DOUT=<dir> -P profile_run.cmake
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(run ${TRAIN} --model micro --data ${DATA} --batch 2 --seq 16 --steps 5 --warmup 2 --val-every 0
    --sample-every 0 --threads 1)
include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

gpt_run(profiled ${run} --profile --log ${OUT}/run.jsonl)
gpt_run(plain ${run} --log ${OUT}/plain.jsonl)
gpt_expect_output(profiled "profile    step 3 will be timed op by op\n")
gpt_expect_output(profiled "profile    step 3, timed op by op with the host's clock\n")

# The table: every op the graph runs in a training step, in its pass.
set(ops "embedding forward" "ln_1 forward" "qkv forward" "attention forward" "attn_proj forward"
    "residual\\+ln_2 forward" "fc\\+gelu forward" "fc_proj forward" "residual\\+ln_1 forward"
    "residual\\+ln_f forward" "lm_head forward" "classifier backward" "lm_head backward backward"
    "residual\\+ln_f backward backward" "fc_proj\\+gelu backward backward" "fc backward backward"
    "residual\\+ln_2 backward backward" "attn_proj backward backward" "attention backward backward"
    "qkv backward backward" "residual\\+ln_1 backward backward" "ln_1 backward backward"
    "embedding backward backward" "zero_grad backward" "optimizer update")
foreach(op ${ops})
  string(REPLACE " " " +" pattern "${op}")
  gpt_expect_output(profiled "\nprofile    ${pattern} +[0-9]+ +[0-9.]+ ")
endforeach()

# The sum of the ops against the step, in the JSON and as the table's share.
file(READ ${OUT}/run.profile.json json)
string(JSON ops_ms GET "${json}" ops_ms)
string(JSON step_ms GET "${json}" step_ms)
string(JSON difference_ms GET "${json}" difference_ms)
# (CMake compares numbers as doubles.)
if(ops_ms GREATER step_ms OR difference_ms LESS 0)
  message(FATAL_ERROR "the ops (${ops_ms} ms) take more than the step (${step_ms} ms)")
endif()
if(NOT stdout_profiled MATCHES "sum of the ops +[0-9.]+ +([0-9.]+)%")
  message(FATAL_ERROR "no share for the sum of the ops:\n${stdout_profiled}")
endif()
set(share ${CMAKE_MATCH_1})
if(share LESS 90 OR share GREATER 100)
  message(FATAL_ERROR "the ops sum to ${share}% of the step (${ops_ms} of ${step_ms} ms), not 90-100%")
endif()

# The JSON: what the table said, and the ops of the graph.
string(JSON kind GET "${json}" kind)
string(JSON stage GET "${json}" stage)
string(JSON roof GET "${json}" roof source)
string(JSON n LENGTH "${json}" ops)
if(NOT kind STREQUAL "gpt-step-profile" OR NOT stage STREQUAL "cpu_reference" OR NOT roof STREQUAL "none" OR n LESS 25)
  message(FATAL_ERROR "the profile's JSON is not what the table printed:\n${json}")
endif()
math(EXPR last "${n} - 1")
set(names "")
foreach(i RANGE ${last})
  string(JSON name GET "${json}" ops ${i} name)
  string(JSON pass GET "${json}" ops ${i} pass)
  list(APPEND names "${name} ${pass}")
endforeach()
foreach(op ${ops})
  string(REPLACE "\\+" "+" op "${op}")
  if(NOT "${op}" IN_LIST names)
    message(FATAL_ERROR "the JSON lacks '${op}': ${names}")
  endif()
endforeach()

# The figure, drawn by tests/bench/step_breakdown.py.
gpt_expect_output(profiled "profile    ${OUT}/run.profile.json, ${OUT}/run.profile.svg\n")
file(READ ${OUT}/run.profile.svg svg LIMIT 2000)
if(NOT svg MATCHES "<svg")
  message(FATAL_ERROR "${OUT}/run.profile.svg is not an SVG")
endif()

# The profiled step changes nothing: the same losses and norms at every step.
gpt_log_events(${OUT}/run.jsonl profiled_steps step)
gpt_log_events(${OUT}/plain.jsonl plain_steps step)
if(NOT profiled_steps STREQUAL plain_steps)
  message(FATAL_ERROR "--profile changed the run:\n  with:    ${profiled_steps}\n  without: ${plain_steps}")
endif()

# Without --log: the table, and where the JSON and figure would go.
gpt_run(no_log ${run} --steps 3 --profile)
gpt_expect_output(no_log "profile    step 3 will be timed op by op; --log PATH also keeps it as JSON and draws it\n")
gpt_expect_output(no_log "sum of the ops")

# A run of two steps profiles its last, and says that it is within the warm-up.
gpt_run(short ${run} --steps 2 --profile)
gpt_expect_output(short "profile    step 2 will be timed op by op \\(within the warm-up")

# A JSON path that cannot be written stops the run before its first step.
file(MAKE_DIRECTORY ${OUT}/taken.profile.json)
execute_process(COMMAND ${run} --profile --log ${OUT}/taken.jsonl RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--profile's table ${OUT}/taken.profile.json" OR out MATCHES "step +1/")
  message(FATAL_ERROR "an unwritable profile path was not refused before training (${rc}):\n${err}\n${out}")
endif()
