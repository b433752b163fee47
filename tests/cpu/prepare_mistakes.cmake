# Mistakes a new user makes with gpt_prepare, each caught with one line (docs/formats.md):
#   two_data_sets     a second --name into the same --out is refused; --add-to-folder mixes them, and
#                     the trainer then says that its --data folder holds two data sets;
#   json_lines_hint   JSON Lines in a file named .txt gets a hint to give --format jsonl;
#   threads           --threads beyond the machine's cores is capped, with a note;
#   failure           a failed run leaves no --out folder it created, and keeps one that was there.
#   cmake -DCASE=<case> -DPREPARE=<gpt_prepare> [-DTRAIN=<train>] -DTOKENIZER=<dir> -DOUT=<scratch dir>
#         -P prepare_mistakes.cmake
include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")

# About 6,300 GPT-2 tokens in 300 lines: enough for both splits at --min-shard-tokens 513 (a
# batch of the CPU trainer's defaults).
set(lines "")
set(text "")
foreach(i RANGE 1 300)
  set(line "Line ${i}: the quick brown fox jumps over the lazy dog number ${i}, and then it rests.")
  string(APPEND text "${line}\n")
  string(APPEND lines "{\"text\": \"${line}\"}\n")
endforeach()
file(WRITE "${OUT}/mytext.txt" "${text}")
set(prepare "${PREPARE}" --tokenizer "${TOKENIZER}" --min-shard-tokens 513)

# prepare_fails(NAME EXPECT COMMAND...): the command must fail with one line on stderr holding EXPECT.
function(prepare_fails name expect)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  string(STRIP "${err}" err)
  string(FIND "${err}" "${expect}" found)
  if(rc EQUAL 0 OR found EQUAL -1 OR err MATCHES "\n")
    message(FATAL_ERROR "${name}: expected a failure with the one line '${expect}', got exit ${rc}:\n${err}\n${out}")
  endif()
  message(STATUS "ok: ${name}: ${err}")
endfunction()

if(CASE STREQUAL "two_data_sets")
  gpt_run(first ${prepare} --out "${OUT}/data" "${OUT}/mytext.txt")
  file(GLOB first_shards "${OUT}/data/*")
  string(REPLACE "brown fox" "red fox" more "${text}")
  file(WRITE "${OUT}/more.txt" "${more}")
  string(CONCAT refusal "--out ${OUT}/data holds the shards of another data set (mytext), which a run on that "
                       "folder would read together with more: give another --out, or --add-to-folder to mix them")
  prepare_fails(second_name "${refusal}" ${prepare} --out "${OUT}/data" "${OUT}/more.txt")
  file(GLOB after "${OUT}/data/*")
  if(NOT after STREQUAL first_shards)
    message(FATAL_ERROR "the refused run changed ${OUT}/data: ${after}")
  endif()

  gpt_run(added ${prepare} --out "${OUT}/data" --add-to-folder "${OUT}/more.txt")
  gpt_run(train ${TRAIN} --data "${OUT}/data" --tokenizer "${TOKENIZER}" --model micro --batch 8 --seq 64 --steps 1
          --val-every 0 --sample-every 0)
  set(each "\\(1 training shard, [0-9,]+ tokens; 1 validation shard\\)")
  string(CONCAT warning "(^|\n)warning: data directory ${OUT}/data holds the shards of 2 data sets, which this run "
                        "reads as one: more ${each}, mytext ${each}; give each its own folder unless the mix is wanted\n")
  gpt_expect_output(train "${warning}")

elseif(CASE STREQUAL "json_lines_hint")
  file(WRITE "${OUT}/docs.txt" "${lines}")
  string(CONCAT hint "hint: ${OUT}/docs.txt starts like JSON Lines ({\"...) but is read as one text document; "
                    "if it holds one JSON object per line, give --format jsonl\n")
  gpt_run(auto ${prepare} --out "${OUT}/auto" "${OUT}/docs.txt")
  string(FIND "${stdout_auto}" "${hint}" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "no hint on the first line:\n${stdout_auto}")
  endif()
  # Asked for by its name: no hint; and --format jsonl reads one document a line.
  gpt_run(text ${prepare} --out "${OUT}/text" --format text "${OUT}/docs.txt")
  gpt_run(jsonl ${prepare} --out "${OUT}/jsonl" --format jsonl "${OUT}/docs.txt")
  foreach(run text jsonl)
    if(stdout_${run} MATCHES "hint:")
      message(FATAL_ERROR "--format ${run} given, yet a hint:\n${stdout_${run}}")
    endif()
  endforeach()
  gpt_expect_output(jsonl "\ndone: 300 documents, ")

elseif(CASE STREQUAL "threads")
  # 1024, the most --threads takes, is more than the cores of any machine this runs on.
  gpt_run(capped ${prepare} --out "${OUT}/capped" --threads 1024 "${OUT}/mytext.txt")
  if(NOT stdout_capped MATCHES "^note: --threads 1024 is more than the ([0-9]+) cores of this machine: using ([0-9]+)")
    message(FATAL_ERROR "no note that --threads 1024 is capped:\n${stdout_capped}")
  elseif(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
    message(FATAL_ERROR "capped at ${CMAKE_MATCH_2}, not at the ${CMAKE_MATCH_1} cores:\n${stdout_capped}")
  endif()
  gpt_expect_output(capped "\ntokenizer: [^\n]*, ${CMAKE_MATCH_1} threads?\n")

elseif(CASE STREQUAL "failure")
  file(WRITE "${OUT}/short.txt" "Too short to train on.\n")
  prepare_fails(new_folder "only 8 tokens" ${prepare} --out "${OUT}/new/data" "${OUT}/short.txt")
  if(EXISTS "${OUT}/new")
    message(FATAL_ERROR "the failed run left the folder it created: ${OUT}/new")
  endif()
  file(MAKE_DIRECTORY "${OUT}/existing")
  prepare_fails(existing_folder "only 8 tokens" ${prepare} --out "${OUT}/existing" "${OUT}/short.txt")
  if(NOT IS_DIRECTORY "${OUT}/existing")
    message(FATAL_ERROR "the failed run removed ${OUT}/existing, a folder it did not create")
  endif()

else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
message(STATUS "ok: ${CASE}")
