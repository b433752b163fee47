# The same model as a checkpoint and as llm.c model files: gpt_llmc writes a checkpoint's
# parameters as llm.c files (fp32, bf16) and back, and a run started with --init from the llm.c
# fp32 file is the run started from the checkpoint, step for step. The bf16 file's run starts
# from the bf16 rounding of the same parameters, so its first loss is only close.
#   cmake -DINIT=<gpt_init> -DLLMC=<gpt_llmc> -DTRAIN=<train> -DDATA=<dir> -DOUT=<dir> -P llmc_equivalence.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

# micro: 3,320,640 parameters; with wte padded to 50304 rows, 47 x 64 more.
gpt_run(init ${INIT} --model micro --seed 7 --out ${OUT}/init.ckpt)
gpt_run(to_v3 ${LLMC} --in ${OUT}/init.ckpt --out ${OUT}/model.bin)
gpt_expect_output(to_v3 "version 3 \\(fp32\\), L=2 H=4 C=64 maxT=64 V=50257, Vp 50304")
gpt_expect_size(model.bin 13295616)  # 1024 + 4 x 3,323,648
gpt_run(to_v5 ${LLMC} --in ${OUT}/init.ckpt --out ${OUT}/model_bf16.bin --dtype bf16)
gpt_expect_output(to_v5 "version 5 \\(bf16\\)")
gpt_expect_size(model_bf16.bin 6648320)  # 1024 + 2 x 3,323,648

# Back to checkpoints. The checkpoint writer is deterministic (no time or path in the file): the
# fp32 round trip gives gpt_init's file byte for byte, and a bf16 file written again from its
# own checkpoint is the same bf16 file (a bf16 value rounds to itself).
gpt_run(back ${LLMC} --in ${OUT}/model.bin --out ${OUT}/back.ckpt)
gpt_expect_output(back "from llm.c model file version 3 \\(fp32\\), Vp 50304")
gpt_expect_same_file(init.ckpt back.ckpt "the fp32 round trip changed the parameters")
gpt_run(back_bf16 ${LLMC} --in ${OUT}/model_bf16.bin --out ${OUT}/back_bf16.ckpt)
gpt_run(again_bf16 ${LLMC} --in ${OUT}/back_bf16.ckpt --out ${OUT}/again_bf16.bin --dtype bf16)
gpt_expect_same_file(model_bf16.bin again_bf16.bin "bf16 values did not survive a round trip")

# Two steps from each file. What must agree: the step events without their timings.
gpt_train_two_steps(from_ckpt init.ckpt)
gpt_train_two_steps(from_v3 model.bin)
gpt_train_two_steps(from_bf16 model_bf16.bin)
if(NOT steps_from_ckpt STREQUAL steps_from_v3)
  message(FATAL_ERROR "the runs from the checkpoint and from its llm.c file differ:\n"
                      "  checkpoint: ${steps_from_ckpt}\n  llm.c v3:   ${steps_from_v3}")
endif()

gpt_first_loss(from_ckpt loss_fp32)
gpt_first_loss(from_bf16 loss_bf16)
math(EXPR diff "${loss_bf16} - ${loss_fp32}")
if(diff LESS -10000 OR diff GREATER 10000)  # 0.01 of about 10.8: 2^-8 relative on each weight moves it far less
  message(FATAL_ERROR "the first loss from the bf16 file is ${loss_bf16} millionths, from the fp32 checkpoint ${loss_fp32}")
endif()
message(STATUS "ok: the llm.c fp32 file trains as its checkpoint, step for step; first loss in millionths: "
               "fp32 ${loss_fp32}, bf16 ${loss_bf16}")
