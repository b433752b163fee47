# Compiles SOURCE twice with the C++ compiler (syntax only): as it is, which must fail with every
# text of EXPECT (a list) in the compiler's output, and with -DCONSISTENT, which must compile.
#   cmake -DCXX=<compiler> -DFLAGS=<flag;...> -DSOURCE=<file> -DEXPECT=<text;...> -P expect_compile_error.cmake
execute_process(COMMAND ${CXX} ${FLAGS} -fsyntax-only -DCONSISTENT ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} with -DCONSISTENT does not compile (so its error below proves nothing):\n${out}${err}")
endif()
execute_process(COMMAND ${CXX} ${FLAGS} -fsyntax-only ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled; it must not")
endif()
foreach(text IN LISTS EXPECT)
  string(FIND "${out}${err}" "${text}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "the compiler's error does not contain '${text}':\n${out}${err}")
  endif()
endforeach()
message(STATUS "ok: ${SOURCE} fails to compile with the expected error")
