# What the CMake script tests (cmake -P) share: include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake).

# gpt_run(NAME COMMAND...): runs the command; if it fails, stops the test with its output.
# Sets stdout_NAME in the caller's scope.
function(gpt_run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${err}\n${out}")
  endif()
  set(stdout_${name} "${out}" PARENT_SCOPE)
endfunction()

# gpt_log_events(FILE OUT_VAR TYPE...): the events of these types in a trainer's --log file,
# without their timings, which differ from run to run while the rest must not.
function(gpt_log_events file out_var)
  list(JOIN ARGN "|" types)
  file(STRINGS ${file} lines)
  set(kept "")
  foreach(line ${lines})
    if(line MATCHES "\"type\": \"(${types})\"")
      string(REGEX REPLACE ", \"ms\": .*$" "" line "${line}")
      list(APPEND kept "${line}")
    endif()
  endforeach()
  set(${out_var} "${kept}" PARENT_SCOPE)
endfunction()

# The model-file scripts (llmc_equivalence.cmake, safetensors_equivalence.cmake) also share
# these; they read OUT (the test's folder), TRAIN (a trainer) and DATA (shards).

function(gpt_expect_output name pattern)
  if(NOT stdout_${name} MATCHES "${pattern}")
    message(FATAL_ERROR "${name} did not print '${pattern}':\n${stdout_${name}}")
  endif()
endfunction()

# gpt_expect_same_file(A B WHY): paths relative to OUT, or absolute.
function(gpt_expect_same_file a b why)
  get_filename_component(a ${a} ABSOLUTE BASE_DIR ${OUT})
  get_filename_component(b ${b} ABSOLUTE BASE_DIR ${OUT})
  file(SHA256 ${a} hash_a)
  file(SHA256 ${b} hash_b)
  if(NOT hash_a STREQUAL hash_b)
    message(FATAL_ERROR "${a} and ${b} differ: ${why}")
  endif()
endfunction()

function(gpt_expect_size name bytes)
  file(SIZE ${OUT}/${name} size)
  if(NOT size EQUAL bytes)
    message(FATAL_ERROR "${OUT}/${name} holds ${size} bytes, expected ${bytes}")
  endif()
endfunction()

# gpt_train_two_steps(NAME FILE): two steps of TRAIN started with --init OUT/FILE; sets steps_NAME to its step
# events without their timings, which must agree between runs of the same model, and stdout_NAME.
function(gpt_train_two_steps name file)
  gpt_run(${name} ${TRAIN} --init ${OUT}/${file} --data ${DATA} --batch 2 --seq 16 --steps 2 --warmup 1
          --val-every 0 --sample-every 0 --threads 1 --log ${OUT}/${name}.jsonl)
  gpt_expect_output(${name} "parameters from ${OUT}/${file}")
  gpt_log_events(${OUT}/${name}.jsonl kept step)
  list(LENGTH kept n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${name} logged ${n} steps, expected 2:\n${stdout_${name}}")
  endif()
  set(steps_${name} "${kept}" PARENT_SCOPE)
  set(stdout_${name} "${stdout_${name}}" PARENT_SCOPE)
endfunction()

# gpt_first_loss(NAME OUT_VAR): the first loss of gpt_train_two_steps(NAME ...), in millionths (CMake's arithmetic is
# integer only).
function(gpt_first_loss name out_var)
  list(GET steps_${name} 0 line)
  if(NOT line MATCHES "\"loss\": ([0-9]+)\\.([0-9]+)")
    message(FATAL_ERROR "no loss in ${line}")
  endif()
  set(whole ${CMAKE_MATCH_1})
  string(SUBSTRING "${CMAKE_MATCH_2}000000" 0 6 micro)
  string(REGEX REPLACE "^0+([0-9])" "\\1" micro "${micro}")
  math(EXPR value "${whole} * 1000000 + ${micro}")
  set(${out_var} ${value} PARENT_SCOPE)
endfunction()
