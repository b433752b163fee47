# Data that trains: shards made by gpt_prepare are all read by a run whose batch fits
# --min-shard-tokens, even where the last shard of a split would have been short.
#   cmake -DPREPARE=<gpt_prepare> -DTRAIN=<train> -DTOKENIZER=<dir> -DOUT=<scratch dir> -P prepare_then_train.cmake
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")

# About 6,300 GPT-2 tokens of text in one document.
set(text "")
foreach(i RANGE 1 300)
  string(APPEND text "Line ${i}: the quick brown fox jumps over the lazy dog number ${i}, and then it rests.\n")
endforeach()
file(WRITE "${OUT}/text.txt" "${text}")

# One batch of the run below is 8 x 64 tokens + 1 = 513. Shards of 1,800 tokens leave a short
# last training shard (about 5,500 tokens: 1,800 + 1,800 + 1,800 + ~150), which must join the
# one before it.
execute_process(COMMAND "${PREPARE}" --out "${OUT}/shards" --tokenizer "${TOKENIZER}" --shard-tokens 1800
                        --min-shard-tokens 513 "${OUT}/text.txt"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt_prepare failed (${rc}):\n${out}${err}")
endif()
message(STATUS "${out}")

file(GLOB shards "${OUT}/shards/*.bin")
list(LENGTH shards n)
if(n LESS 3)
  message(FATAL_ERROR "expected a validation shard and several training shards, got: ${shards}")
endif()
foreach(shard ${shards})
  file(READ "${shard}" count_hex OFFSET 8 LIMIT 4 HEX)  # header[2], the token count (little-endian)
  string(REGEX REPLACE "(..)(..)(..)(..)" "\\4\\3\\2\\1" count_hex "${count_hex}")
  math(EXPR count "0x${count_hex}")
  if(count LESS 513)
    message(FATAL_ERROR "${shard} holds ${count} tokens, fewer than --min-shard-tokens 513")
  endif()
endforeach()

execute_process(COMMAND "${TRAIN}" --data "${OUT}/shards" --tokenizer "${TOKENIZER}" --model micro --batch 8 --seq 64
                        --steps 12 --val-every 12 --val-batches 1 --sample-every 0
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR out MATCHES "warning" OR NOT "${err}" STREQUAL "")
  message(FATAL_ERROR "the run on the prepared shards did not read them all (exit ${rc}):\n${out}${err}")
endif()
# The three training shards hold 3 windows of 8 x 64 tokens each: step 9 reads the last, and the
# run says so once; 12 steps of 512 tokens read the ~5,550 training tokens 1.1 times.
if(NOT out MATCHES "epochs 1\\.1 \\(12 steps x 512 tokens\\): the run reads its training tokens more than once"
   OR NOT out MATCHES "step 9 read the last training tokens: from step 10 the run reads them again"
   OR NOT out MATCHES "summary [^\n]*, epochs 1\\.1\n")
  message(FATAL_ERROR "the run should say how often it reads its training tokens, and when it starts again:\n${out}")
endif()
string(REGEX MATCHALL "reads them again" again "${out}")
list(LENGTH again n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "the note that the data starts again should come once, not ${n} times:\n${out}")
endif()
message(STATUS "ok: every shard holds a batch, and the run read them:\n${out}")
