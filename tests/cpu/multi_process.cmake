# Several processes of the CPU trainer, started as users start them (gpt_launch; mpirun where the
# build has MPI), train as one process of the whole batch; a checkpoint written by two processes
# goes on in one.
#   cmake -DLAUNCH=gpt_launch -DTRAIN=train -DDATA=dir -DOUT=dir [-DMPIRUN=mpirun] -P multi_process.cmake
include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(args ${TRAIN} --data ${DATA} --model micro --batch 2 --seq 16 --steps 4 --warmup 1 --lr 1e-3
         --sample-every 0 --val-every 2)

# Two processes of 2 sequences, stopping after step 2; then one process of 2 x 2 sequences
# (two micro-batches) resumes their checkpoint. And one process of 2 x 2 sequences throughout.
# Validation reads one batch on each of two processes, two batches on one: the same 4 windows.
gpt_run(two ${LAUNCH} --nproc 2 -- ${args} --val-batches 1 --stop-after 2 --save ${OUT}/two.ckpt
        --log ${OUT}/two.jsonl)
if(NOT stdout_two MATCHES "parallel   2 processes over TCP")
  message(FATAL_ERROR "two processes did not say so:\n${stdout_two}")
endif()
gpt_run(resumed ${args} --val-batches 2 --total-batch 64 --resume ${OUT}/two.ckpt --log ${OUT}/resumed.jsonl)
gpt_run(one ${args} --val-batches 2 --total-batch 64 --log ${OUT}/one.jsonl)

# The losses of a log, in millionths (CMake has only integer arithmetic).
function(losses file out_var)
  gpt_log_events(${file} events step val)
  set(values "")
  foreach(e ${events})
    if(NOT e MATCHES "\"(loss|val_loss)\": ([0-9]+)\\.([0-9]+)")
      message(FATAL_ERROR "no loss in ${file}: ${e}")
    endif()
    set(whole ${CMAKE_MATCH_2})
    string(SUBSTRING "${CMAKE_MATCH_3}000000" 0 6 micro)
    string(REGEX REPLACE "^0+([0-9])" "\\1" micro "${micro}")  # not octal
    math(EXPR v "${whole} * 1000000 + ${micro}")
    list(APPEND values ${v})
  endforeach()
  set(${out_var} "${values}" PARENT_SCOPE)
endfunction()

# Sums over processes add in another order: equal within the fp32 model tolerance (1e-4
# relative; a loss near 11 may move by 1100 millionths), not bit for bit.
function(expect_close what actual expected)
  list(LENGTH actual n)
  list(LENGTH expected m)
  if(NOT n EQUAL m OR n EQUAL 0)
    message(FATAL_ERROR "${what}: ${n} losses, expected ${m}")
  endif()
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    list(GET actual ${i} a)
    list(GET expected ${i} b)
    math(EXPR diff "${a} - ${b}")
    math(EXPR limit "${b} / 10000 + 1")
    if(diff GREATER limit OR diff LESS -${limit})
      message(FATAL_ERROR "${what}: loss ${i} is ${a}e-6, expected ${b}e-6 (within ${limit}e-6)")
    endif()
  endforeach()
endfunction()

losses(${OUT}/one.jsonl one)
losses(${OUT}/two.jsonl two)
losses(${OUT}/resumed.jsonl resumed)
list(SUBLIST one 0 3 one_first)  # steps 1, 2 and the validation after step 2
list(SUBLIST one 3 -1 one_rest)
expect_close("two processes, steps 1-2" "${two}" "${one_first}")
expect_close("resumed in one process, steps 3-4" "${resumed}" "${one_rest}")

if(MPIRUN)
  gpt_run(mpi ${MPIRUN} -np 2 --oversubscribe ${args} --val-batches 1 --stop-after 2 --save ${OUT}/mpi.ckpt
          --log ${OUT}/mpi.jsonl)
  if(NOT stdout_mpi MATCHES "met over MPI")
    message(FATAL_ERROR "mpirun's processes did not meet over MPI:\n${stdout_mpi}")
  endif()
  losses(${OUT}/mpi.jsonl mpi)
  expect_close("two processes under mpirun, steps 1-2" "${mpi}" "${one_first}")
endif()
message(STATUS "two processes train as one of twice the batch; their checkpoint resumes in one")
