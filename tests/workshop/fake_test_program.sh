#!/bin/sh
# A stand-in for test_stageNN in the tests of expect_exercise.cmake: prints what GoogleTest
# prints for one outcome ($1) of the tests Kernels.A and Kernels.B of exercise stage00.demo.
run() { echo "[ RUN      ] Kernels.$1"; }
failed() { echo "[  FAILED  ] Kernels.$1 (1 ms)"; }
case "$1" in
  all_fail_named) run A; echo "exercise stage00.demo is not written yet"; failed A
                  run B; failed B; exit 1 ;;
  unnamed)        run A; echo "expected 1, got 0"; failed A; run B; failed B; exit 1 ;;
  one_passes)     run A; echo "exercise stage00.demo is not written yet"; failed A
                  run B; echo "[       OK ] Kernels.B (1 ms)"; exit 1 ;;
  crash)          run A; kill -SEGV $$ ;;
  skipped)        run A; echo "[  SKIPPED ] Kernels.A (0 ms)"; run B; echo "[  SKIPPED ] Kernels.B (0 ms)"; exit 0 ;;
esac
