# What the ./train launcher reads from a build tree:
#   train.target      the trainer's target and its file, so that the launcher can build and run it;
#   train.configured  when the tree was last configured, in microseconds since 1970, so that the
#                     launcher runs the tree configured last. CMakeCache.txt cannot tell: running
#                     `cmake --preset NAME` again on an existing tree need not rewrite it.
#   train.workshop    instead of both, in a workshop build, which has no trainer: the launcher
#                     skips the tree, or says why when GPT_PRESET names it.
# gpt_launcher_files(<trainer target>), at the end of the top-level CMakeLists.txt.
function(gpt_launcher_files target)
  file(REMOVE ${CMAKE_BINARY_DIR}/train.workshop)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/train.target CONTENT "${target}\n$<TARGET_FILE:${target}>\n")
  string(TIMESTAMP now "%s%f" UTC)  # %f: microseconds, so that two configures a second apart differ
  file(WRITE ${CMAKE_BINARY_DIR}/train.configured "${now}\n")
endfunction()

# gpt_launcher_workshop_build(): marks a workshop build's tree (no trainer in it).
function(gpt_launcher_workshop_build)
  file(REMOVE ${CMAKE_BINARY_DIR}/train.target ${CMAKE_BINARY_DIR}/train.configured)
  file(WRITE ${CMAKE_BINARY_DIR}/train.workshop "a workshop build: its programs are the exercises' tests\n")
endfunction()
