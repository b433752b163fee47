#!/usr/bin/env python3
"""Self-test of a stage beside PyTorch: tests/bench/step_breakdown_vs_torch.py (the page) and
tests/reference/profile_trace.py (what gpt2_reference.py --profile-step makes of a profiler trace).

    python3 tests/reference/test_step_breakdown_vs_torch.py   (CTest: step_breakdown_vs_torch_selftest, label bench)

No GPU and no torch: on made-up Chrome traces in the form torch.profiler writes (kineto: phases
as user annotations, CPU ops with "External id" and "Input Dims", launches with "correlation",
kernels, copies and fills), one of a compiled step (stage 05's counterpart) and one of an eager
fp32 step (stage 00's), and on made-up kernel-benchmark files and committed ones (stage 02 of
docs/results/2026-11-23_h100, stages 00-03 of docs/results/2026-11-28_h200):

  - the summary links every kernel to the part of the step and the op that launched it, sums the
    device time per kernel name and counts the GPU's busy time once where kernels overlap;
  - representative kernel names (cuBLAS, nvjet, Inductor's triton_*, FlashAttention, cuDNN,
    the foreach and fused AdamW) land in the groups of step_breakdown.py; a matrix product with a
    vocabulary-sized dimension is the LM head, one launched by aten::bmm attention;
  - eager PyTorch's own kernels (ATen's LayerNorm, softmax, GELU, loss, embedding, copies, fills,
    adds and sums) land in their groups by the op that launched them and its input shapes, for
    fp32, TF32, bf16 autocast and SDPA; the compiled step's kernels keep their groups;
  - the page's C++ column is step_breakdown.py's sum, its PyTorch column the profile's groups,
    C++ ÷ PyTorch beside them, and the groups over --flag-over (1.25×) marked;
  - the exit statuses: 0 complete, 1 incomplete (a C++ row missing, another GPU, a ladder that
    cannot be compared), 2 what cannot be compared or read.

Python standard library only; about a second. The pages and figures of the made-up runs (stage
05 beside compiled PyTorch, stage 00 beside eager fp32) go to $STEP_BREAKDOWN_VS_TORCH_OUT (CTest:
the build directory), or to a temporary directory.
"""

import gzip
import json
import os
import re
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BENCH = os.path.join(REPO, "tests", "bench")
SCRIPT = os.path.join(BENCH, "step_breakdown_vs_torch.py")
STAGE02 = os.path.join(REPO, "docs", "results", "2026-11-23_h100", "kernels", "stage02.json")

sys.path.insert(0, BENCH)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import profile_trace  # noqa: E402  (next to this file)
import script_harness  # noqa: E402  (next to this file)
import step_breakdown  # noqa: E402
import step_breakdown_vs_torch as vs  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"
V, VP = 50257, 50304
BT, C = 16 * 1024, 768

# Real-looking kernel names, as the profiler of PyTorch 2.x on an H100 shows them.
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NVJET = "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNN"
FLASH_FWD = "flash_fwd_kernel"
FLASH_BWD = "pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, double, double, double, double, double, bool, float*, float*>(...)")
LPNORM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
          "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, 2, float, float>, float*, "
          "int>(...)")
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float, ...>(...)"
LN_BWD = "triton_per_fused_native_layer_norm_native_layer_norm_backward_3"
CE_BWD = "triton_red_fused__log_softmax_backward_data_nll_loss_backward_0"
H2D = "Memcpy HtoD (Pageable -> Device)"

# The made-up step: (phase, kernel, kind, op, input dims, launches, µs each) and the group each
# must land in. Per group, in ms: embedding 0.5, LayerNorm 7.6, block matmuls 18.6, attention
# 16.8, GELU + residual 1.2, LM head 8.0, classifier 2.5, optimizer 1.6, other 1.05: 57.85.
STEP = [
    ("data", H2D, "memcpy", "aten::copy_", [[16, 1024], [16, 1024]], 1, 500, "other"),
    ("forward", "triton_poi_fused_add_embedding_0", "kernel", "CompiledFunction", None, 1, 100, "embedding"),
    ("forward", "triton_per_fused_native_layer_norm_1", "kernel", "CompiledFunction", None, 1, 200, "layernorm"),
    ("forward", GEMM, "kernel", "aten::addmm", [[3 * C], [BT, C], [C, 3 * C], [], []], 12, 500, "matmul"),
    ("forward", FLASH_FWD, "kernel", "aten::_flash_attention_forward", [[16, 1024, 12, 64]] * 3, 12, 400,
     "attention"),
    ("forward", "triton_poi_fused_addmm_gelu_view_2", "kernel", "CompiledFunction", None, 12, 100, "gelu_residual"),
    ("forward", "triton_per_fused_add_native_layer_norm_3", "kernel", "CompiledFunction", None, 24, 100, "layernorm"),
    ("forward", NVJET, "kernel", "aten::mm", [[BT, C], [C, VP]], 1, 3000, "lm_head"),
    ("forward", "triton_red_fused__log_softmax__to_copy_slice_4", "kernel", "CompiledFunction", None, 1, 1000,
     "classifier"),
    ("forward", "triton_poi_fused__to_copy_5", "kernel", "CompiledFunction", None, 1, 300, "other"),
    ("backward", CE_BWD, "kernel", "CompiledFunctionBackward", None, 1, 1500, "classifier"),
    ("backward", GEMM, "kernel", "aten::mm", [[BT, VP], [VP, C]], 2, 2500, "lm_head"),
    ("backward", LN_BWD, "kernel", "CompiledFunctionBackward", None, 25, 200, "layernorm"),
    ("backward", FLASH_BWD, "kernel", "aten::_flash_attention_backward", None, 12, 1000, "attention"),
    ("backward", GEMM, "kernel", "aten::mm", [[BT, C], [C, 4 * C]], 24, 500, "matmul"),
    ("backward", "triton_red_fused_sum_6", "kernel", "CompiledFunctionBackward", None, 12, 50, "matmul"),
    ("backward", "triton_poi_fused_embedding_dense_backward_7", "kernel", "CompiledFunctionBackward", None, 1, 400,
     "embedding"),
    ("backward", "triton_poi_fused_clone_8", "kernel", "CompiledFunctionBackward", None, 1, 200, "other"),
    ("optimizer", ADAM, "kernel", "aten::_fused_adamw_", None, 1, 1200, "optimizer"),
    ("optimizer", MUL, "kernel", "aten::mul_", [[], []], 1, 100, "optimizer"),
    ("optimizer", LPNORM, "kernel", "aten::_foreach_norm", None, 1, 300, "optimizer"),
    (None, "mystery_kernel", "kernel", None, None, 1, 50, "other"),
]
GROUP_MS = {"embedding": 0.5, "layernorm": 7.6, "matmul": 18.6, "attention": 16.8, "gelu_residual": 1.2,
            "lm_head": 8.0, "classifier": 2.5, "optimizer": 1.6, "other": 1.05}
TOTAL_MS = 57.85


# Stage 00 beside its eager counterpart (ladder.py --torch fp32): the committed kernel benchmark of
# stage 00 on an H200, and a made-up eager fp32 step as PyTorch 2.x runs it there, ATen's own
# kernels, each launched by the op the profiler records for it (the innermost one).
H200 = "NVIDIA H200"
RESULTS = os.path.join(REPO, "docs", "results", "2026-11-28_h200", "kernels")
STAGE0X = {n: os.path.join(RESULTS, f"stage{n}.json") for n in ("00", "01", "02", "03")}
B, T, NH, Q = 16, 1024, 12, 64
EAGER_FP32 = {"precision": "fp32", "attention": "manual", "sdpa_backend": None, "compile": False,
              "compile_mode": "default", "vocab_pad": 1, "padded_vocab": V, "inductor_shape_padding": "default",
              "fused_adamw": False}
EAGER_SDPA = dict(EAGER_FP32, precision="bf16", attention="sdpa", sdpa_backend="flash")


def aten(kernel):
    return f"void at::native::{kernel}"


SGEMM_TN, SGEMM_NN = "ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_nn"  # cuBLAS fp32 (no TF32)
ADD = aten("vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
           "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
ADD_BROADCAST = aten("elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add"
                     "<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>"
                     "(int, ...)")
COPY = aten("elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda"
            "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
            "{lambda(float)#1}>(...)::{lambda(int)#1}>(int, ...)")  # a strided copy: into heads and back
COPY_VEC = aten("vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
                "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
                "at::detail::Array<char*, 2> >(...)")
FILL = aten("vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
            "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
SUM = aten("reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
           "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
           "unsigned int, float, 4, 4> >(at::native::ReduceOp<...>)")
MUL = aten("vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
           "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(...)")
MASKED_FILL = aten("elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::masked_fill_kernel"
                   "(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda(float, bool)"
                   "#1}>(...)::{lambda(int)#1}>(int, ...)")
ARANGE = aten("(anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(...)::"
              "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(long)#1}>(...)")
EMB_BWD = "embedding_dense_backward"
EAGER_STEP = [
    # phase, kernel, kind, launching op, its input dims, launches, µs each, group
    ("data", H2D, "memcpy", "aten::copy_", [[B, T], [B, T], []], 2, 10, "other"),
    ("forward", ARANGE, "kernel", "aten::arange", [[], [], [], [], [], []], 1, 2, "embedding"),
    ("forward", aten("(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(...)"),
     "kernel", "aten::index_select", [[V, C], [], [BT]], 1, 30, "embedding"),
    ("forward", aten("(anonymous namespace)::indexSelectSmallIndex<float, long, unsigned int, 2, 2, -2>(...)"),
     "kernel", "aten::index_select", [[T, C], [], [T]], 1, 3, "embedding"),
    ("forward", ADD_BROADCAST, "kernel", "aten::add", [[B, T, C], [T, C], []], 1, 25, "embedding"),
    ("forward", aten("(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, "
                     "float const*, float const*, float*, float*, float*)"), "kernel", "aten::native_layer_norm",
     [[B, T, C], [], [C], [C], []], 25, 30, "layernorm"),
    ("forward", SGEMM_TN, "kernel", "aten::addmm", [[3 * C], [BT, C], [C, 3 * C], [], []], 48, 1200, "matmul"),
    ("forward", COPY, "kernel", "aten::copy_", [[B, NH, T, Q], [B, NH, T, Q], []], 48, 30, "attention"),
    ("forward", SGEMM_NN, "kernel", "aten::bmm", [[B * NH, T, Q], [B * NH, Q, T]], 24, 800, "attention"),
    ("forward", MUL, "kernel", "aten::mul", [[B, NH, T, T], []], 12, 400, "attention"),
    ("forward", aten("vectorized_elementwise_kernel<4, at::native::bitwise_not_kernel_cuda(at::TensorIteratorBase&)::"
                     "{lambda(bool)#1}, at::detail::Array<char*, 2> >(...)"), "kernel", "aten::bitwise_not",
     [[T, T]], 12, 5, "attention"),
    ("forward", COPY_VEC, "kernel", "aten::copy_", [[B, NH, T, T], [B, NH, T, T], []], 12, 400, "attention"),
    ("forward", MASKED_FILL, "kernel", "aten::masked_fill_", [[B, NH, T, T], [T, T], []], 12, 400, "attention"),
    ("forward", "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, "
     "float const*, int, int, int, bool const*, int, bool)", "kernel", "aten::_softmax", [[B, NH, T, T], [], []],
     12, 450, "attention"),
    ("forward", aten("vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
                     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
                     "{lambda(float)#1}, at::detail::Array<char*, 2> >(...)"), "kernel", "aten::gelu",
     [[B, T, 4 * C], []], 12, 100, "gelu_residual"),
    ("forward", ADD, "kernel", "aten::add", [[B, T, C], [B, T, C], []], 24, 40, "gelu_residual"),
    ("forward", SGEMM_TN, "kernel", "aten::mm", [[BT, C], [C, V]], 1, 25000, "lm_head"),
    ("forward", aten("(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous "
                     "namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"), "kernel",
     "aten::_log_softmax", [[BT, V], [], []], 1, 2000, "classifier"),
    ("forward", aten("(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(...)"),
     "kernel", "aten::nll_loss_forward", [[BT, V], [BT], [], [], []], 1, 20, "classifier"),
    ("backward", FILL, "kernel", "aten::fill_", [[], []], 1, 2, "other"),  # the seed: ones_like(loss)
    ("backward", FILL, "kernel", "aten::fill_", [[BT, V], []], 1, 800, "classifier"),  # nll_loss_backward's zeros
    ("backward", aten("(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(...)"), "kernel",
     "aten::nll_loss_backward", [[], [BT, V], [BT], [], [], [], []], 1, 10, "classifier"),
    ("backward", aten("(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous "
                      "namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"), "kernel",
     "aten::_log_softmax_backward_data", [[BT, V], [BT, V], [], []], 1, 2500, "classifier"),
    ("backward", SGEMM_NN, "kernel", "aten::mm", [[BT, V], [V, C]], 2, 25000, "lm_head"),
    ("backward", aten("(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float>(...)"), "kernel",
     "aten::native_layer_norm_backward", [[B, T, C], [B, T, C], [], [B, T, 1], [B, T, 1], [C], [C], []], 25, 40,
     "layernorm"),
    ("backward", aten("(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(...)"), "kernel",
     "aten::native_layer_norm_backward", [[B, T, C], [B, T, C], [], [B, T, 1], [B, T, 1], [C], [C], []], 25, 20,
     "layernorm"),
    ("backward", ADD, "kernel", "aten::add_", [[B, T, C], [B, T, C], []], 24, 40, "layernorm"),  # dres += dln
    ("backward", SGEMM_NN, "kernel", "aten::mm", [[BT, 3 * C], [3 * C, C]], 96, 1200, "matmul"),
    ("backward", SUM, "kernel", "aten::sum", [[BT, 4 * C], [], [], []], 48, 25, "matmul"),  # the biases' gradients
    ("backward", aten("vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&,"
                      " at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
                      "{lambda(float, float)#1}, at::detail::Array<char*, 3> >(...)"), "kernel", "aten::gelu_backward",
     [[B, T, 4 * C], [B, T, 4 * C], []], 12, 150, "gelu_residual"),
    ("backward", COPY, "kernel", "aten::copy_", [[B, NH, T, Q], [B, NH, T, Q], []], 48, 30, "attention"),
    ("backward", SGEMM_NN, "kernel", "aten::bmm", [[B * NH, T, T], [B * NH, T, Q]], 48, 800, "attention"),
    ("backward", "void (anonymous namespace)::softmax_warp_backward<float, float, float, 10, false, false>(...)",
     "kernel", "aten::_softmax_backward_data", [[B, NH, T, T], [B, NH, T, T], [], []], 12, 600, "attention"),
    ("backward", COPY_VEC, "kernel", "aten::copy_", [[B, NH, T, T], [B, NH, T, T], []], 12, 400, "attention"),
    ("backward", MASKED_FILL, "kernel", "aten::masked_fill_", [[B, NH, T, T], [T, T], []], 12, 400, "attention"),
    ("backward", MUL, "kernel", "aten::mul", [[B, NH, T, T], []], 12, 400, "attention"),
    ("backward", aten("(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, "
                      "unsigned int, 3, 128, 1>(...)"), "kernel", "aten::cat", [[[B, T, C], [B, T, C], [B, T, C]], []],
     12, 40, "attention"),  # the qkv split's backward
    ("backward", SUM, "kernel", "aten::sum", [[B, T, C], [], [], []], 1, 20, "embedding"),  # wpe's, over the batch
    ("backward", aten("(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>(...)"), "kernel",
     f"aten::{EMB_BWD}", [[T, C], [T], [], [], []], 1, 10, "embedding"),
    ("backward", FILL, "kernel", "aten::fill_", [[V, C], []], 1, 40, "embedding"),  # wte's gradient, zeroed
    ("backward", ARANGE, "kernel", "aten::arange", [[], [], [], [], [], []], 1, 2, "embedding"),
    ("backward", "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<...>(...)", "kernel", f"aten::{EMB_BWD}",
     [[B, T, C], [B, T], [], [], []], 1, 15, "embedding"),
    ("backward", aten("(anonymous namespace)::compute_grad_weight<float, long>(...)"), "kernel", f"aten::{EMB_BWD}",
     [[B, T, C], [B, T], [], [], []], 1, 30, "embedding"),
    ("backward", aten("(anonymous namespace)::sum_and_scatter<float, long>(...)"), "kernel", f"aten::{EMB_BWD}",
     [[B, T, C], [B, T], [], [], []], 1, 20, "embedding"),
    ("backward", "Memcpy DtoH (Device -> Pinned)", "memcpy", "aten::_local_scalar_dense", [[]], 1, 2, "other"),
    ("backward", ADD, "kernel", "aten::add_", [[V, C], [V, C], []], 1, 80, "embedding"),  # wte: + the LM head's
    ("optimizer", LPNORM, "kernel", "aten::_foreach_norm", None, 1, 300, "optimizer"),
    ("optimizer", MUL, "kernel", "aten::_foreach_mul_", None, 1, 100, "optimizer"),
    ("optimizer", ADAM, "kernel", "aten::_foreach_addcdiv_", None, 10, 150, "optimizer"),
]
EAGER_MS = {}
for _p, _k, _kind, _op, _dims, _n, _us, _group in EAGER_STEP:
    EAGER_MS[_group] = EAGER_MS.get(_group, 0.0) + _n * _us / 1000.0


def chrome_trace(step=STEP, overlap=False):
    """The made-up step as torch.profiler's Chrome trace: phase ranges on the main thread, CPU ops on
    the main thread (the backward's on autograd's), one launch per kernel, kernels on stream 7."""
    events = [{"ph": "X", "cat": "python_function", "name": "train", "ts": 0, "dur": 10 ** 7}]
    host, dev, ext, corr = 1000.0, 2000.0, 100, 5000
    for phase in ("data", "forward", "backward", "optimizer"):
        start = host
        for p, name, kind, op, dims, n, us, _ in step:
            if p != phase:
                continue
            for _ in range(n):
                ext += 1
                corr += 1
                op_args = {"External id": ext, "Record function id": 0, "Sequence number": 7}
                if dims is not None:
                    op_args["Input Dims"] = dims
                tid = 2 if phase == "backward" else 1
                events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": tid, "ts": host, "dur": 8,
                               "args": op_args})
                # Inductor's kernels are launched through the driver, the libraries' through the runtime.
                cat, call = (("cuda_driver", "cuLaunchKernel") if name.startswith("triton_") else
                             ("cuda_runtime", "cudaLaunchKernel" if kind == "kernel" else "cudaMemcpyAsync"))
                events.append({"ph": "X", "cat": cat, "name": call, "pid": 1, "tid": tid, "ts": host + 2, "dur": 4,
                               "args": {"External id": ext, "cbid": 211, "correlation": corr}})
                events.append({"ph": "X", "cat": {"kernel": "kernel", "memcpy": "gpu_memcpy"}[kind], "name": name,
                               "pid": 0, "tid": 7, "ts": dev, "dur": us,
                               "args": {"External id": ext, "correlation": corr, "device": 0, "stream": 7}})
                events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "ts": host + 2})
                host += 10
                dev += us if not overlap else us / 2  # overlap: each kernel starts halfway through the last
        events.append({"ph": "X", "cat": "user_annotation", "name": profile_trace.PHASE_PREFIX + phase, "pid": 1,
                       "tid": 1, "ts": start - 1, "dur": host - start + 1, "args": {"External id": 1}})
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": profile_trace.PHASE_PREFIX + phase,
                       "pid": 0, "tid": 7, "ts": 0, "dur": 10 ** 7})
        host += 100
    for p, name, kind, op, dims, n, us, _ in step:  # launched outside every phase, no op, no launch
        if p is None:
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": dev, "dur": us,
                           "args": {"External id": 0, "correlation": 1}})
            dev += us
    return {"schemaVersion": 1, "deviceProperties": [{"name": GPU}], "traceEvents": events}


def profile_json(trace=None, batch=16, seq=1024, gpu=GPU, settings=None, **about):
    """What gpt2_reference.py --profile-step writes for the made-up step (settings: the compiled
    "pad" entry's, or those given)."""
    summary = {"torch_version": "2.11.0+cu130", "device": "cuda", "device_name": gpu,
               "config": {"maxT": 1024, "V": V, "L": 12, "H": 12, "C": C, "params": 124439808},
               "settings": dict(settings or {"precision": "bf16", "attention": "sdpa", "compile": True,
                                             "compile_mode": "default", "vocab_pad": 64, "padded_vocab": VP,
                                             "fused_adamw": False}, batch=batch, seq=seq),
               "program": "gpt2_reference.py --profile-step", "date": "2026-12-01T10:00:00Z", "profiled_step": 5,
               "steps_before": 5, "step_ms_median": 41.2, "profiled_step_wall_ms": 63.5, "loss": 9.8, "trace": None}
    summary.update(about)
    summary.update(profile_trace.summarise(profile_trace.load_trace(trace) if isinstance(trace, str) else
                                           (trace or chrome_trace())["traceEvents"]))
    return summary


def row(op, pass_, ms, source, batch=16):
    return {"op": op, "pass": pass_, "batch": batch, "seq": 1024, "source": source, "status": "ok",
            "reason": None, "ms_median": ms}


def stage05(ms=0.1, drop=()):
    """A kernel benchmark JSON of stage 05: every row step_breakdown.py knows, the slots fused."""
    rows = [row(*name.rsplit(" ", 1), ms, "stages/00_fp32_baseline/x.cuh") for name in step_breakdown.ROWS
            if name != "Optimizer step"]
    rows += [row(*name.rsplit(" ", 1), ms, "stages/04_fused_kernels/fused.cuh") for name in step_breakdown.SLOTS
             if name != "MatmulBiasGelu fc backward"]
    rows.append(row("Optimizer", "step", ms, "stages/04_fused_kernels/adamw.cuh", batch=None))
    rows = [r for r in rows if f"{r['op']} {r['pass']}" not in drop]
    return {"stage": "05_vocab_padding", "device_name": GPU, "date": "2026-12-01T09:00:00Z",
            "model": {"C": C, "NH": 12, "HS": 64, "V": V, "Vp": VP, "maxT": 1024},
            "settings": {"batch": [8, 16], "seq": 1024}, "rows": rows}


def ladder_json(gpu=GPU, batch=16):
    return {"meta": {"gpu": gpu, "batch": batch, "seq": 1024},
            "entries": [{"kind": "cpp", "stage": "05", "key": "cpp_05", "status": "ok", "median_ms": 40.0},
                        {"kind": "torch", "stage": "05", "key": "torch_pad", "label": "PyTorch compile + vocab padded "
                         "to 64", "status": "ok", "median_ms": 60.0},
                        {"kind": "torch", "stage": "04", "key": "torch_compile", "status": "ok", "median_ms": 61.0}]}


def call(*args):
    return script_harness.call(vs.main, *map(str, args))


def table(stdout):
    """{label: (C++ ms, PyTorch ms)} of the table on stdout ('–' is None); the ratios after them are
    read by ratios()."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\S.*?)\s{2,}(\S+)\s+(\S+)(?:\s|$)", line)
        if m and m.group(1) in set(vs.SHORT.values()) | {"sum", "ladder ms/step", "ladder - sum"}:
            out[m.group(1)] = tuple(None if x == "–" else float(x) for x in m.group(2, 3))
    return out


class Summary(unittest.TestCase):
    def setUp(self):
        self.profile = profile_json()

    def test_totals_phases_and_links(self):
        t = self.profile["totals"]
        self.assertEqual(t["events"], sum(n for *_, n, _us, _g in STEP))
        self.assertAlmostEqual(t["gpu_ms"], TOTAL_MS, places=6)
        self.assertAlmostEqual(t["memcpy_ms"], 0.5, places=6)
        self.assertAlmostEqual(t["gpu_busy_ms"], TOTAL_MS, places=6)  # back to back: no overlap
        self.assertEqual((t["no_phase"], t["no_op"]), (1, 1))  # mystery_kernel
        phases = self.profile["phases"]
        self.assertEqual(sorted(phases), ["backward", "data", "forward", "optimizer"])
        self.assertAlmostEqual(phases["optimizer"]["gpu_ms"], 1.6, places=6)
        self.assertEqual(phases["backward"]["events"], 1 + 2 + 25 + 12 + 24 + 12 + 1 + 1)

    def test_kernels_by_name_with_their_calls(self):
        kernels = {k["name"]: k for k in self.profile["kernels"]}
        self.assertEqual(len(kernels), len({name for _, name, *_ in STEP}))
        gemm = kernels[GEMM]
        self.assertEqual(gemm["count"], 12 + 2 + 24)
        self.assertAlmostEqual(gemm["ms"], 6.0 + 5.0 + 12.0, places=6)
        self.assertEqual(sorted((c["phase"], c["op"], c["count"]) for c in gemm["calls"]),
                         [("backward", "aten::mm", 2), ("backward", "aten::mm", 24), ("forward", "aten::addmm", 12)])
        self.assertIn([BT, VP], next(c for c in gemm["calls"] if c["count"] == 2)["input_dims"])
        self.assertEqual(self.profile["kernels"][0]["name"], GEMM)  # the most time first
        self.assertEqual(kernels[H2D]["kind"], "memcpy")

    def test_overlapping_kernels_count_once_as_busy_time(self):
        p = profile_json(chrome_trace(overlap=True))
        self.assertAlmostEqual(p["totals"]["gpu_ms"], TOTAL_MS, places=6)
        self.assertLess(p["totals"]["gpu_busy_ms"], TOTAL_MS * 0.6)
        self.assertEqual(profile_trace.union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]), 4.0)

    def test_without_launch_events_the_op_gives_the_phase(self):
        # Traces without runtime or driver events: the op with the kernel's External id places it.
        trace = chrome_trace()
        trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")]
        p = profile_json(trace)
        self.assertEqual(p["totals"]["no_phase"], 1)
        self.assertAlmostEqual(p["phases"]["forward"]["gpu_ms"], 0.1 + 0.2 + 6.0 + 4.8 + 1.2 + 2.4 + 3.0 + 1.0 + 0.3,
                               places=6)

    def test_legacy_list_gzip_and_the_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "t.json.gz")
            with gzip.open(trace, "wt") as f:
                json.dump(chrome_trace()["traceEvents"], f)  # a bare list, as PyTorch 1.x writes it
            meta = os.path.join(tmp, "meta.json")
            with open(meta, "w") as f:
                json.dump(profile_json(), f)
            out = os.path.join(tmp, "again.json")
            r = script_harness.call(profile_trace.main, trace, "--out", out, "--meta", meta)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(out) as f:
                again = json.load(f)
            self.assertEqual(again["kernels"], self.profile["kernels"])
            self.assertEqual(again["settings"]["padded_vocab"], VP)
            r = script_harness.call(profile_trace.main, os.path.join(tmp, "none.json"), "--out", out)
            self.assertEqual(r.returncode, 2)
            self.assertIn("cannot read", r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1)


class Grouping(unittest.TestCase):
    def group(self, name, phase="forward", kind="kernel", dims=None):
        return vs.classify(name, kind, {"phase": phase, "op": None, "input_dims": dims}, {V, VP})[0]

    def test_representative_names(self):
        cases = [
            (GEMM, "forward", None, "matmul"),
            (GEMM, "backward", [[BT, VP], [VP, C]], "lm_head"),
            (GEMM, "forward", [[BT, C], [C, V]], "lm_head"),  # unpadded
            (NVJET, "backward", [[BT, C], [C, 4 * C]], "matmul"),
            ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(...)",
             "forward", None, "matmul"),
            ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(...)", "backward", None,
             "matmul"),
            (LN_BWD, "backward", None, "layernorm"),
            ("triton_per_fused_add_native_layer_norm_3", "forward", None, "layernorm"),
            (FLASH_FWD, "forward", None, "attention"),
            ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
             "cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
             "forward", None, "attention"),
            (FLASH_BWD, "backward", None, "attention"),
            ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "backward", None, "attention"),
            ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
             "forward", None, "attention"),
            (ADAM, "optimizer", None, "optimizer"),
            (ADAM, None, None, "optimizer"),  # no phase: by its name
            (MUL, "optimizer", None, "optimizer"),  # the clipping's scaling: by its phase
            (MUL, "forward", None, "other"),
            (CE_BWD, "backward", None, "classifier"),
            ("triton_red_fused__log_softmax_backward_data_nll_loss_backward_...", "backward", None, "classifier"),
            ("triton_per_fused_nll_loss_forward_5", "forward", None, "classifier"),
            ("triton_poi_fused_add_embedding_0", "forward", None, "embedding"),
            ("triton_poi_fused_embedding_dense_backward_7", "backward", None, "embedding"),
            ("triton_poi_fused_gelu_gelu_backward_9", "backward", None, "gelu_residual"),
            ("triton_poi_fused_addmm_gelu_view_2", "forward", None, "gelu_residual"),
            ("triton_poi_fused_add_10", "backward", None, "gelu_residual"),
            ("triton_red_fused_sum_6", "backward", None, "matmul"),
            ("triton_tem_fused_mm_0", "forward", None, "matmul"),
            ("triton_poi_fused__to_copy_5", "forward", None, "other"),
            ("triton_poi_fused_clone_8", "backward", None, "other"),
            ("triton_poi_fused_addcdiv_lerp_0", "optimizer", None, "optimizer"),
        ]
        for name, phase, dims, group in cases:
            with self.subTest(name=name[:60], phase=phase):
                self.assertEqual(self.group(name, phase, dims=dims), group)
        self.assertEqual(self.group(H2D, "data", "memcpy"), "other")
        self.assertEqual(self.group("Memset (Device)", "backward", "memset"), "other")
        self.assertEqual(self.group("Memset (Device)", "optimizer", "memset"), "optimizer")

    def test_every_rule_names_a_group_of_step_breakdown(self):
        keys = {key for key, _, _ in step_breakdown.GROUPS} | {"other"}
        self.assertTrue(all(r.group in keys for r in vs.RULES))
        self.assertEqual([key for key, _, _ in vs.ALL_GROUPS[:-1]], [key for key, _, _ in step_breakdown.GROUPS])


class Page(script_harness.InputFiles):

    def test_the_page_of_a_made_up_run(self):
        out_dir = os.environ.get("STEP_BREAKDOWN_VS_TORCH_OUT") or self.dir
        os.makedirs(out_dir, exist_ok=True)
        md, svg = os.path.join(out_dir, "stage05_vs_pytorch.md"), os.path.join(out_dir, "stage05_vs_pytorch.svg")
        kernels = self.write("stage05.json", stage05())
        r = call("--kernels", kernels, "--profile", self.write("profile.json", profile_json()), "--out", md,
                 "--svg", svg, "--ladder", self.write("results.json", ladder_json()))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        rows = table(r.stdout)
        cpp = step_breakdown.Stage(kernels, stage05(), 16, 12)  # the C++ column is step_breakdown.py's sum
        for key, _, _ in step_breakdown.GROUPS:
            self.assertAlmostEqual(rows[vs.SHORT[key]][0], cpp.groups[key], places=2)
            self.assertAlmostEqual(rows[vs.SHORT[key]][1], GROUP_MS[key], places=2)
        self.assertEqual(rows["other"], (None, 1.05))
        self.assertAlmostEqual(rows["sum"][0], cpp.total, places=2)
        self.assertAlmostEqual(rows["sum"][1], TOTAL_MS, places=2)
        self.assertEqual(rows["ladder ms/step"], (40.0, 60.0))
        self.assertEqual(rows["ladder - sum"], (round(40.0 - cpp.total, 2), round(60.0 - TOTAL_MS, 2)))
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("| **sum** | **17.60** | **57.85** | **3.29×** |", text)
        self.assertIn("bf16 + SDPA + torch.compile + vocab padded to 50304", text)
        self.assertIn("](stage05_vs_pytorch.svg)", text)
        self.assertIn("sorted alphabetically", text)
        self.assertIn("`mystery_kernel`", text)  # every kernel of other is listed
        self.assertIn("`triton_poi_fused__to_copy_5` | 1 | 0.300 | no rule: an Inductor kernel of other ops |", text)
        self.assertIn("`triton_per_fused_add_native_layer_norm_3` | 24 | 2.400 | rule 5, ops: layer_norm |", text)
        self.assertIn("| 3.000 | rule 11, name: nvjet; a dimension of V or Vp |", text)
        for line in text.splitlines():  # no table row broken by a bar in a cell
            if line.startswith("| ") and "|---" not in line:
                self.assertIn(len(re.split(r"(?<!\\)\|", line)), (5, 6, 7), line)
        self.assertIn("| `sm90_xmma_gemm_", text)
        self.assertRegex(text, r"\| Optimizer step \| 0\.1000 \| 1 \| 0\.10 \| optimizer")
        root = ET.parse(svg).getroot()
        labels = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
        self.assertIn("stage 05 (C++)", labels)
        self.assertIn("sum 57.9 ms", labels)
        self.assertIn("ladder 60.0", labels)

    def test_the_committed_stage_02_sums_as_step_breakdown_does(self):
        md = os.path.join(self.dir, "p.md")
        r = call("--kernels", STAGE02, "--profile", self.write("p.json", profile_json()), "--out", md)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(round(table(r.stdout)["sum"][0], 1), 271.2)  # step_breakdown_selftest: 548.7, 340.6, 271.2
        self.assertFalse(os.path.exists(os.path.join(self.dir, "p.svg")))

    def test_incomplete_exits_1(self):
        profile = self.write("p.json", profile_json())
        md = os.path.join(self.dir, "p.md")
        r = call("--kernels", self.write("k.json", stage05(drop=["Attention forward"])), "--profile", profile,
                 "--out", md)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("row 'Attention forward' (B=16) is not in the file", r.stderr)
        with open(md, encoding="utf-8") as f:
            self.assertIn("## Incomplete", f.read())
        kernels = self.write("k2.json", stage05())
        r = call("--kernels", kernels, "--profile", self.write("q.json", profile_json(gpu="NVIDIA A100-SXM4-80GB")),
                 "--out", md)
        self.assertEqual(r.returncode, 1)
        self.assertIn("the PyTorch side on NVIDIA A100-SXM4-80GB", r.stderr)
        r = call("--kernels", kernels, "--profile", profile, "--out", md, "--ladder",
                 self.write("l.json", ladder_json(batch=8)))
        self.assertEqual(r.returncode, 1)
        self.assertIn("ladder: the ladder ran B=8", r.stderr)
        ladder = ladder_json()
        ladder["entries"] = ladder["entries"][:1]
        r = call("--kernels", kernels, "--profile", profile, "--out", md, "--ladder", self.write("m.json", ladder))
        self.assertEqual(r.returncode, 1)
        self.assertIn("no finished torch entry of stage 05", r.stderr)

    def test_what_cannot_be_compared_exits_2(self):
        kernels, md = self.write("k.json", stage05()), os.path.join(self.dir, "p.md")
        cases = [
            (self.write("b.json", profile_json(batch=8)), "B 16 and 8"),
            (self.write("t.json", profile_json(seq=512)), "T 1024 and 512"),
            (self.write("cpu.json", dict(profile_json(), kernels=[])), "lists no GPU kernels"),
            (os.path.join(self.dir, "none.json"), "cannot read"),
        ]
        for profile, message in cases:
            with self.subTest(message=message):
                r = call("--kernels", kernels, "--profile", profile, "--out", md)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(message, r.stderr)
                self.assertEqual(r.stderr.count("\n"), 1)
        self.assertFalse(os.path.exists(md))
        r = call("--kernels", kernels, "--out", md)
        self.assertEqual(r.returncode, 2)
        r = call("--kernels", kernels, "--profile", self.write("p.json", profile_json()), "--out", md, "--batch", 4)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no measured rows at B=4", r.stderr)


def ratios(stdout):
    """{label: (C++ ÷ PyTorch, over --flag-over)} of the table on stdout."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\S.*?)\s{2,}\S+\s+\S+\s+\S+×\s+(\S+)×(\s+over .*)?$", line)
        if m:
            out[m.group(1)] = (float(m.group(2)), bool(m.group(3)))
    return out


def eager_profile(step=EAGER_STEP, settings=EAGER_FP32, **about):
    return profile_json(chrome_trace(step), gpu=H200, settings=settings, **about)


class EagerGrouping(unittest.TestCase):
    """Eager PyTorch's own kernels, by the op that launched them (rules 12-25)."""

    SIZES = {"B": B, "T": T}

    def group(self, name, phase, op, dims, kind="kernel"):
        return vs.classify(name, kind, {"phase": phase, "op": op, "input_dims": dims}, {V}, self.SIZES)

    def test_every_kernel_of_the_eager_step(self):
        for phase, name, kind, op, dims, _, _, group in EAGER_STEP:
            with self.subTest(name=name[:60], op=op, dims=dims):
                self.assertEqual(self.group(name, phase, op, dims, kind)[0], group)
        # The same cuBLAS kernel is a block matmul, the LM head or attention by its launching op.
        self.assertEqual(self.group(SGEMM_NN, "backward", "aten::bmm", [[B * NH, T, T], [B * NH, T, Q]]),
                         ("attention", "rule 11, name: gemm; launched by aten::bmm"))
        self.assertEqual(self.group(ADD, "backward", "aten::add_", [[B, T, C], [B, T, C], []])[1],
                         "rule 25, op: aten::add_ in the backward")
        self.assertEqual(self.group(COPY, "forward", "aten::copy_", [[B, NH, T, Q], [B, NH, T, Q], []])[1],
                         "rule 18, op: aten::copy_, shapes: heads")

    def test_bf16_tf32_and_sdpa_eager(self):
        bf16_copy = aten("vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
                         "at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2> >(...)")
        cases = [
            # autocast's casts: of the weights and the activations (other), of the softmax's input and output
            # (attention), of the logits to fp32 and of their gradient back (classifier)
            (bf16_copy, "forward", "aten::copy_", [[3 * C, C], [3 * C, C], []], "other"),
            (bf16_copy, "forward", "aten::copy_", [[V, C], [V, C], []], "other"),  # the tied LM head's weight
            (bf16_copy, "forward", "aten::copy_", [[B, T, C], [B, T, C], []], "other"),
            (COPY_VEC, "forward", "aten::copy_", [[B, NH, T, T], [B, NH, T, T], []], "attention"),
            (COPY_VEC, "forward", "aten::copy_", [[BT, V], [BT, V], []], "classifier"),
            (bf16_copy, "backward", "aten::copy_", [[BT, V], [BT, V], []], "classifier"),
            # TF32 and bf16 products: other names, the same ops
            ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(...)", "forward",
             "aten::addmm", [[C], [BT, C], [C, C], [], []], "matmul"),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
             "kernel__5x_cublas", "backward", "aten::bmm", [[B * NH, T, T], [B * NH, T, Q]], "attention"),
            (GEMM, "forward", "aten::mm", [[BT, C], [C, V]], "lm_head"),
            # a product by a name no rule knows, by its op
            ("some_future_gemmless_kernel", "forward", "aten::mm", [[BT, C], [C, V]], "lm_head"),
            ("some_future_gemmless_kernel", "forward", "aten::bmm", [[B * NH, T, Q], [B * NH, Q, T]], "attention"),
            ("some_future_gemmless_kernel", "backward", "aten::mm", [[BT, 4 * C], [4 * C, C]], "matmul"),
            # eager SDPA (stage 03's counterpart): the flash kernels by name, its zeroed dq accumulator by shape
            (FLASH_FWD, "forward", "aten::_flash_attention_forward", [[B, T, NH, Q]] * 3, "attention"),
            (FLASH_BWD, "backward", "aten::_flash_attention_backward", None, "attention"),
            (FILL, "backward", "aten::fill_", [[B, T, NH, Q], []], "attention"),
            ("void pytorch_flash::flash_bwd_convert_dq_kernel<...>(...)", "backward",
             "aten::_flash_attention_backward", None, "attention"),
            # the vocabulary padded (sdpa_pad): the logits' slice to V and its backward
            (COPY, "forward", "aten::copy_", [[BT, V], [BT, V], []], "classifier"),
            (FILL, "backward", "aten::fill_", [[B, T, VP], []], "other"),  # not V here: VP is not this model's
            # what no rule knows
            (SUM, "backward", "aten::sum", [[128, C], [], [], []], "other"),  # not a bias's gradient: 128 rows
            (FILL, "backward", "aten::fill_", [[C], []], "other"),
            (MUL, "backward", "aten::mul", [[B, T, C], []], "other"),
            (ADD, None, "aten::add", [[B, T, C], [B, T, C], []], "other"),  # an add outside forward and backward
            ("mystery_kernel", "forward", None, None, "other"),  # no op recorded
        ]
        for name, phase, op, dims, group in cases:
            with self.subTest(name=name[:60], op=op, dims=dims):
                self.assertEqual(self.group(name, phase, op, dims)[0], group)
        self.assertEqual(vs.classify(FILL, "kernel", {"phase": "backward", "op": "aten::fill_",
                                                      "input_dims": [[B, T, VP], []]}, {V, VP}, self.SIZES)[0],
                         "classifier")  # with the padded vocabulary it is the logits' gradient
        self.assertEqual(self.group("Memcpy DtoD (Device -> Device)", "backward", "aten::copy_", [[B, NH, T, Q]] * 2,
                                    "memcpy")[0], "attention")  # the rules on ops read copies and fills too

    def test_the_compiled_step_is_grouped_as_before(self):
        # The rules on ops read no Inductor kernel and come after the library names: with B and T known,
        # every kernel of the compiled step keeps its group.
        for phase, name, kind, op, dims, _, _, group in STEP:
            with self.subTest(name=name[:60]):
                self.assertEqual(vs.classify(name, kind, {"phase": phase, "op": op, "input_dims": dims}, {V, VP},
                                             self.SIZES)[0], group)

    def test_the_ladder_entry_of_a_profile(self):
        cases = [(EAGER_FP32, ("fp32", "00")), (dict(EAGER_FP32, precision="tf32"), ("tf32", "01")),
                 (dict(EAGER_FP32, precision="bf16"), ("bf16", "02")), (EAGER_SDPA, ("sdpa", "03")),
                 (dict(EAGER_SDPA, vocab_pad=64), ("sdpa_pad", "03")),
                 (profile_json()["settings"], ("pad", "05")),  # without sdpa_backend: any backend
                 (dict(EAGER_SDPA, sdpa_backend="cudnn"), (None, None))]
        for settings, entry in cases:
            with self.subTest(entry=entry):
                self.assertEqual(vs.ladder_entry(settings), entry)
        self.assertEqual(vs.torch_label(EAGER_FP32), "fp32 + manual attention, eager")
        self.assertEqual(vs.torch_label(EAGER_SDPA, "flash"), "bf16 + SDPA (flash), eager")


class EagerPage(script_harness.InputFiles):
    """Stage 00 (the committed kernel benchmark of docs/results/2026-11-28_h200) beside eager fp32."""

    def test_stage_00_beside_eager_fp32(self):
        out_dir = os.environ.get("STEP_BREAKDOWN_VS_TORCH_OUT") or self.dir
        os.makedirs(out_dir, exist_ok=True)
        md = os.path.join(out_dir, "stage00_vs_pytorch_fp32.md")
        r = call("--kernels", STAGE0X["00"], "--profile", self.write("p00.json", eager_profile()), "--out", md,
                 "--svg", os.path.join(out_dir, "stage00_vs_pytorch_fp32.svg"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        with open(STAGE0X["00"]) as f:
            cpp = step_breakdown.Stage(STAGE0X["00"], json.load(f), 16, 12)
        rows, times = table(r.stdout), ratios(r.stdout)
        for key, _, _ in step_breakdown.GROUPS:
            label = vs.SHORT[key]
            with self.subTest(group=label):
                self.assertAlmostEqual(rows[label][0], cpp.groups[key], places=2)
                self.assertAlmostEqual(rows[label][1], EAGER_MS[key], places=2)
                self.assertAlmostEqual(times[label][0], cpp.groups[key] / EAGER_MS[key], places=2)
                self.assertEqual(times[label][1], cpp.groups[key] > 1.25 * EAGER_MS[key])
        self.assertEqual(rows["other"], (None, round(EAGER_MS["other"], 2)))
        self.assertEqual(sorted(k for k, (_, over) in times.items() if over),
                         ["GELU + residual", "LayerNorm", "attention", "classifier"])
        self.assertEqual(times["sum"], (1.36, False))  # the sum is not a group: never marked
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("| group | C++ ms/step | PyTorch ms/step | PyTorch ÷ C++ | C++ ÷ PyTorch (× PyTorch's time) |",
                      text)
        self.assertIn("| attention | 198.73 | 102.42 | 0.52× | **1.94×**, over 1.25× |", text)
        self.assertIn("| block matmuls | 172.91 | 174.00 | 1.01× | 0.99× |", text)
        self.assertIn("| **sum** | **499.38** | **366.12** | **0.73×** | **1.36×** |", text)
        self.assertIn("Over 1.25× here: attention (1.94×), LayerNorm (11.20×), GELU + residual (1.34×), "
                      "classifier (1.52×).", text)
        self.assertIn("the PyTorch reference, fp32 + manual attention, eager (the ladder's `--torch fp32`, stage 00's "
                      "counterpart) |", text)
        self.assertIn("| `ampere_sgemm_128x64_nn` | 72 | 57.600 | rule 11, name: gemm; launched by aten::bmm |", text)
        self.assertIn("| `ampere_sgemm_128x64_nn` | 2 | 50.000 | rule 11, name: gemm; a dimension of V or Vp |", text)
        self.assertIn("| `vectorized_layer_norm_kernel<float, float>` | 25 | 0.750 | rule 14, op: "
                      "aten::native_layer_norm |", text)
        self.assertIn("`Memcpy DtoH (Device -> Pinned)` | 1 | 0.002 | no rule: a memcpy |", text)
        self.assertIn("--torch fp32 --profile-step PATH", text)
        self.assertIn("Eager PyTorch runs one ATen op", text)
        self.assertNotIn("sorted alphabetically", text)  # the Inductor notes are the compiled step's
        root = ET.parse(os.path.join(out_dir, "stage00_vs_pytorch_fp32.svg")).getroot()
        labels = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
        self.assertIn("fp32 eager", labels)
        self.assertIn("sum 366.1 ms", labels)
        for line in text.splitlines():
            if line.startswith("| ") and "|---" not in line:
                self.assertIn(len(re.split(r"(?<!\\)\|", line)), (5, 6, 7), line)

        r = call("--kernels", STAGE0X["00"], "--profile", self.write("p.json", eager_profile()), "--out", md,
                 "--flag-over", 20)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(any(over for _, over in ratios(r.stdout).values()))
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("No group is over 20× here.", text)
        self.assertIn("--flag-over 20", text)
        r = call("--kernels", STAGE0X["00"], "--profile", self.write("q.json", eager_profile()), "--out", md,
                 "--flag-over", 0)
        self.assertEqual(r.returncode, 2)

    def test_stages_01_to_03_are_accepted(self):
        profile = self.write("p.json", eager_profile())
        for n, key in (("01", "tf32"), ("02", "bf16"), ("03", "sdpa")):
            with self.subTest(stage=n):
                md = os.path.join(self.dir, f"s{n}.md")
                r = call("--kernels", STAGE0X[n], "--profile", profile, "--out", md)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                with open(STAGE0X[n]) as f:
                    cpp = step_breakdown.Stage(STAGE0X[n], json.load(f), 16, 12)
                self.assertAlmostEqual(table(r.stdout)["sum"][0], cpp.total, places=2)
                with open(md, encoding="utf-8") as f:
                    self.assertIn(f"stage 00's counterpart; stage {n}'s is `--torch {key}`)", f.read())

    def test_the_ladder_entry_is_the_profiles(self):
        # Stage 03 has two PyTorch entries in the ladder (sdpa, and sdpa_pad of the vocabulary question):
        # the page takes the one its profile ran.
        ladder = {"meta": {"gpu": H200, "batch": 16, "seq": 1024}, "entries": [
            {"kind": "cpp", "stage": "03", "key": "cpp_03", "status": "ok", "median_ms": 110.0},
            {"kind": "torch", "stage": "03", "key": "torch_sdpa_pad", "status": "ok", "median_ms": 120.0},
            {"kind": "torch", "stage": "03", "key": "torch_sdpa", "status": "ok", "median_ms": 130.0}]}
        md = os.path.join(self.dir, "s03.md")
        r = call("--kernels", STAGE0X["03"], "--profile",
                 self.write("p.json", eager_profile(settings=EAGER_SDPA, sdpa_backend="flash")), "--out", md,
                 "--ladder", self.write("results.json", ladder))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(table(r.stdout)["ladder ms/step"], (110.0, 130.0))
        with open(md, encoding="utf-8") as f:
            self.assertIn("bf16 + SDPA (flash), eager (the ladder's `--torch sdpa`, stage 03's counterpart)", f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
