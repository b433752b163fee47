# The same model as a checkpoint and as a Hugging Face directory: gpt_safetensors writes a
# checkpoint's parameters as a directory (F32, BF16) and back, and a run started with --init from
# the F32 directory is the run started from the checkpoint, step for step. The tokenizer's files
# are the project's own, copied; an llm.c file's padded rows are not written.
#   cmake -DINIT=<gpt_init> -DTOOL=<gpt_safetensors> -DLLMC=<gpt_llmc> -DTRAIN=<train> -DDATA=<dir>
#         -DTOKENIZER=<dir> -DOUT=<dir> -P safetensors_equivalence.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)

# micro: 3,320,640 parameters, 28 tensors.
gpt_run(init ${INIT} --model micro --seed 7 --out ${OUT}/init.ckpt)
gpt_run(to_hf ${TOOL} --in ${OUT}/init.ckpt --out ${OUT}/hf --tokenizer ${TOKENIZER})
gpt_expect_output(to_hf "GPT-2 in the Hugging Face layout \\(F32\\), L=2 H=4 C=64 maxT=64 V=50257, 3,320,640 parameters: "
                        "model.safetensors, config.json, generation_config.json, vocab.json, merges.txt, tokenizer_config.json")
gpt_expect_same_file(hf/vocab.json ${TOKENIZER}/encoder.json "vocab.json is not GPT-2's encoder.json")
gpt_expect_same_file(hf/merges.txt ${TOKENIZER}/vocab.bpe "merges.txt is not GPT-2's vocab.bpe")
gpt_run(to_hf_bf16 ${TOOL} --in ${OUT}/init.ckpt --out ${OUT}/hf_bf16 --dtype bf16 --tokenizer none)
gpt_expect_output(to_hf_bf16 "\\(BF16\\).*: model.safetensors, config.json, generation_config.json\n")
if(EXISTS ${OUT}/hf_bf16/vocab.json)
  message(FATAL_ERROR "--tokenizer none wrote vocab.json")
endif()

# Back to a checkpoint: gpt_init's file byte for byte from the F32 directory (the checkpoint
# writer puts no time or path in the file); the BF16 directory written again from its own
# checkpoint is the same file (a bf16 value rounds to itself).
gpt_run(back ${TOOL} --in ${OUT}/hf --out ${OUT}/back.ckpt)
gpt_expect_output(back "read       ${OUT}/hf/model.safetensors: GPT-2 in the Hugging Face layout \\(GPT2LMHeadModel keys")
gpt_expect_same_file(init.ckpt back.ckpt "the F32 round trip changed the parameters")
gpt_run(back_bf16 ${TOOL} --in ${OUT}/hf_bf16/model.safetensors --out ${OUT}/back_bf16.ckpt)
gpt_run(again_bf16 ${TOOL} --in ${OUT}/back_bf16.ckpt --out ${OUT}/again_bf16 --dtype bf16 --tokenizer none)
gpt_expect_same_file(hf_bf16/model.safetensors again_bf16/model.safetensors "bf16 values did not survive a round trip")

# From an llm.c file of 50304 rows: the directory holds the model's 50257, as transformers expects.
gpt_run(to_llmc ${LLMC} --in ${OUT}/init.ckpt --out ${OUT}/model.bin)
gpt_run(llmc_to_hf ${TOOL} --in ${OUT}/model.bin --out ${OUT}/from_llmc --tokenizer none)
gpt_expect_output(llmc_to_hf "Vp 50304, the padded rows dropped")
gpt_expect_same_file(from_llmc/model.safetensors hf/model.safetensors "the llm.c file's directory differs")

# Two steps from each; the banner says what --init read.
gpt_train_two_steps(from_ckpt init.ckpt)
gpt_train_two_steps(from_hf hf)
gpt_expect_output(from_hf "init       ${OUT}/hf/model.safetensors: GPT-2 in the Hugging Face layout")
gpt_expect_output(from_hf "init       sizes from the tensors. shapes and n_head 4 from ${OUT}/hf/config.json")
gpt_train_two_steps(from_bf16 hf_bf16/model.safetensors)
if(NOT steps_from_ckpt STREQUAL steps_from_hf)
  message(FATAL_ERROR "the runs from the checkpoint and from its Hugging Face directory differ:\n"
                      "  checkpoint:  ${steps_from_ckpt}\n  safetensors: ${steps_from_hf}")
endif()
gpt_first_loss(from_ckpt loss_fp32)
gpt_first_loss(from_bf16 loss_bf16)
math(EXPR diff "${loss_bf16} - ${loss_fp32}")
if(diff LESS -10000 OR diff GREATER 10000)  # as in llmc_equivalence.cmake: bf16 moves the loss far less
  message(FATAL_ERROR "the first loss from the BF16 file is ${loss_bf16} millionths, from the checkpoint ${loss_fp32}")
endif()
message(STATUS "ok: the F32 directory trains as its checkpoint, step for step; first loss in millionths: "
               "fp32 ${loss_fp32}, bf16 ${loss_bf16}")
