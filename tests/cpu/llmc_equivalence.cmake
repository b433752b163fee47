# The same model as a checkpoint and as llm.c model files: gpt_llmc writes a checkpoint's
# parameters as llm.c files (fp32, bf16) and back, and a run started with --init from the llm.c
# fp32 file is the run started from the checkpoint, step for step. The bf16 file's run starts
# from the bf16 rounding of the same parameters, so its first loss is only close.
#   cmake -DINIT=<gpt_init> -DLLMC=<gpt_llmc> -DTRAIN=<train> -DDATA=<dir> -DOUT=<dir> -P llmc_equivalence.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

function(expect_output name pattern)
  if(NOT stdout_${name} MATCHES "${pattern}")
    message(FATAL_ERROR "${name} did not print '${pattern}':\n${stdout_${name}}")
  endif()
endfunction()

function(expect_same_file a b why)
  file(SHA256 ${OUT}/${a} hash_a)
  file(SHA256 ${OUT}/${b} hash_b)
  if(NOT hash_a STREQUAL hash_b)
    message(FATAL_ERROR "${OUT}/${a} and ${OUT}/${b} differ: ${why}")
  endif()
endfunction()

function(expect_size name bytes)
  file(SIZE ${OUT}/${name} size)
  if(NOT size EQUAL bytes)
    message(FATAL_ERROR "${OUT}/${name} holds ${size} bytes, expected ${bytes}")
  endif()
endfunction()

# micro: 3,320,640 parameters; with wte padded to 50304 rows, 47 x 64 more.
gpt_run(init ${INIT} --model micro --seed 7 --out ${OUT}/init.ckpt)
gpt_run(to_v3 ${LLMC} --in ${OUT}/init.ckpt --out ${OUT}/model.bin)
expect_output(to_v3 "version 3 \\(fp32\\), L=2 H=4 C=64 maxT=64 V=50257, Vp 50304")
expect_size(model.bin 13295616)  # 1024 + 4 x 3,323,648
gpt_run(to_v5 ${LLMC} --in ${OUT}/init.ckpt --out ${OUT}/model_bf16.bin --dtype bf16)
expect_output(to_v5 "version 5 \\(bf16\\)")
expect_size(model_bf16.bin 6648320)  # 1024 + 2 x 3,323,648

# Back to checkpoints. The checkpoint writer is deterministic (no time or path in the file): the
# fp32 round trip gives gpt_init's file byte for byte, and a bf16 file written again from its
# own checkpoint is the same bf16 file (a bf16 value rounds to itself).
gpt_run(back ${LLMC} --in ${OUT}/model.bin --out ${OUT}/back.ckpt)
expect_output(back "from llm.c model file version 3 \\(fp32\\), Vp 50304")
expect_same_file(init.ckpt back.ckpt "the fp32 round trip changed the parameters")
gpt_run(back_bf16 ${LLMC} --in ${OUT}/model_bf16.bin --out ${OUT}/back_bf16.ckpt)
gpt_run(again_bf16 ${LLMC} --in ${OUT}/back_bf16.ckpt --out ${OUT}/again_bf16.bin --dtype bf16)
expect_same_file(model_bf16.bin again_bf16.bin "bf16 values did not survive a round trip")

# Two steps from each file. What must agree: the step events without their timings.
function(train name file)
  gpt_run(${name} ${TRAIN} --init ${OUT}/${file} --data ${DATA} --batch 2 --seq 16 --steps 2 --warmup 1
          --val-every 0 --sample-every 0 --threads 1 --log ${OUT}/${name}.jsonl)
  expect_output(${name} "parameters from ${OUT}/${file}")
  gpt_log_events(${OUT}/${name}.jsonl kept step)
  list(LENGTH kept n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${name} logged ${n} steps, expected 2:\n${stdout_${name}}")
  endif()
  set(steps_${name} "${kept}" PARENT_SCOPE)
endfunction()
train(from_ckpt init.ckpt)
train(from_v3 model.bin)
train(from_bf16 model_bf16.bin)
if(NOT steps_from_ckpt STREQUAL steps_from_v3)
  message(FATAL_ERROR "the runs from the checkpoint and from its llm.c file differ:\n"
                      "  checkpoint: ${steps_from_ckpt}\n  llm.c v3:   ${steps_from_v3}")
endif()

# The first loss, in millionths (CMake's arithmetic is integer only).
function(first_loss name out_var)
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
first_loss(from_ckpt loss_fp32)
first_loss(from_bf16 loss_bf16)
math(EXPR diff "${loss_bf16} - ${loss_fp32}")
if(diff LESS -10000 OR diff GREATER 10000)  # 0.01 of about 10.8: 2^-8 relative on each weight moves it far less
  message(FATAL_ERROR "the first loss from the bf16 file is ${loss_bf16} millionths, from the fp32 checkpoint ${loss_fp32}")
endif()
message(STATUS "ok: the llm.c fp32 file trains as its checkpoint, step for step; first loss in millionths: "
               "fp32 ${loss_fp32}, bf16 ${loss_bf16}")
