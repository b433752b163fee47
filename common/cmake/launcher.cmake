# What the ./train launcher reads from a build tree:
#   train.target      the trainer's target and its file, so that the launcher can build and run it;
#   train.configured  when the tree was last configured, in microseconds since 1970, so that the
#                     launcher runs the tree configured last. CMakeCache.txt cannot tell: running
#                     `cmake --preset NAME` again on an existing tree need not rewrite it.
# gpt_launcher_files(<trainer target>), at the end of the top-level CMakeLists.txt.
function(gpt_launcher_files target)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/train.target CONTENT "${target}\n$<TARGET_FILE:${target}>\n")
  string(TIMESTAMP now "%s%f" UTC)  # %f: microseconds, so that two configures a second apart differ
  file(WRITE ${CMAKE_BINARY_DIR}/train.configured "${now}\n")
endfunction()
