"""The WebGPU target: onnxruntime's WebGPU provider, whose shaders keep many sums in FP16.

Which op kinds accumulate in FP16 is read from the WGSL shader generators of microsoft/onnxruntime,
``onnxruntime/core/providers/webgpu/``, read on 2026-11-25 at the commits given per file (the stored
snapshot of each file; the repository's tags were not fetchable here, so no release is named: every
file below is from after 1.22). An FP16 tensor's WGSL element type is ``f16``; a shader that declares
its accumulator with the input's or output's element type (``x_value_t``, ``output_value_t``,
``a_element_t``) sums in FP16, one that declares ``f32`` sums in FP32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ..float_types import LowPrecision
from ..native_oracles import WEBGPU
from ..suggested import RunArgs, quoted
from .accumulation import SumsInFp16
from .base import Accumulation
from .commands import Commands, NamedCommands

WEBGPU_ACCUMULATION: Mapping[str, Accumulation] = {
    # math/matmul_packed.cc (commit e0432f8d126cb90da5d5fa210d98054f241a0740) MatMulProgram:
    #   'std::string data_type = "a_element_t";' passed to MakeMatMulPackedVec4Source/MakeMatMulPackedSource,
    # and math/gemm_utils.cc (commit 100d864ab1d4230595f0b0d6caf73c7482197943) declares the tile's
    # accumulator with it: '"  var acc: array<vec4<" << data_type << ">, rowPerThread>;\n"'.
    "MatMul": "fp16",
    # math/gemm_packed.cc (commit 8f2e9165f74800483193e4657d225eb22158343c) GemmProgram:
    #   'const std::string data_type = "output_element_t";' into the same MakeMatMulPacked*Source.
    "Gemm": "fp16",
    # nn/conv2d_mm_webgpu.cc (commit 32f8ecbfa39ea9a48ba9b2008b5ba93ccf9f5562) Conv2dMMProgram:
    #   'std::string data_type = "x_element_t";' into the same MakeMatMulPacked*Source.
    "Conv": "fp16",
    # reduction/reduction_ops.cc (commit 7dc1cd04e8e706ade8feb7464d06d08ecbb0dd80) ReduceSharedProgram:
    #   '"var bestValue = output_value_t(" << reduce_op_init_values_map[...]' summed with
    #   '{ReduceOpType::Mean, "bestValue + candidate"}' (Sum the same, SumSquare
    #   "bestValue + candidate * candidate", L1 "bestValue + abs(candidate)", LogSumExp
    #   "bestValue + output_value_t(exp(f32(candidate)))": exp(x) summed without subtracting the max),
    # and the Mean divided after: '"(bestValue / output_element_t(uniforms.reduceSize))"'. Only the
    # naive program sums in f32 ('{"var sum = f32(0);", "sum += f32(current_element);", ...}'), chosen
    # when 'use_naive_reduction = ... (reduce_size < 32 && output_size > 1024) ...': a sum of fewer than
    # 32 terms, which cannot pass 65504 from FP16 terms below 2048; the table takes the shared program.
    "ReduceSum": "fp16",
    "ReduceMean": "fp16",
    "ReduceL1": "fp16",
    "ReduceL2": "fp16",
    "ReduceSumSquare": "fp16",
    "ReduceLogSum": "fp16",
    "ReduceLogSumExp": "fp16",
    # math/softmax.cc (commit 697ab887bd10d1b618a0a632f6a837cb5e4edc32) SoftmaxProgram: the denominator
    #   '"  var thread_sum = x_value_t(0.0);\n"' ... '"    thread_sum += sub_exp;\n"', reduced in
    #   'var<workgroup> thread_shared : array<x_value_t, ...>' and divided:
    #   '"    let value = exp(getValue(row, col, row_stride) - row_max_shared) / row_sum_shared;\n"'.
    "Softmax": "fp16",
    # nn/pool.cc (commit 8b77e058e5a9e82e20a0b50de9618ec70f1faee4) PoolProgram for average pools:
    #   'var_decl_ss << "  var value = " << (is_float16_ ? "f16(0)" : "f32(0)")', '"      value += x_val;\n"'.
    "AveragePool": "fp16",
    "GlobalAveragePool": "fp16",
    # math/cum_sum.cc (commit 3eda700a53f2ed945664dce56203d40e0168328a) CumSumProgram:
    #   '"var sum : output_value_t = 0;\n"' ... '"  sum = sum + " << input.GetByIndices("input_indices")'.
    "CumSum": "fp16",
    # MeanVarianceNormalization has no WebGPU kernel (nn/ registers none); onnxruntime inlines its function
    # body, whose ReduceMean nodes are the ReduceSharedProgram above.
    "MeanVarianceNormalization": "fp16",
    # Accumulate in FP32:
    # nn/layer_norm.cc (commit 5aeccdd85d030bb98463986a3ffedf3f8860f53f) LayerNormProgram:
    #   '"var mean_vector = f32_val_t(0);\n"', '"var mean_square_vector = f32_val_t(0);\n"' with
    #   'alias f32_val_t = ... "f32"' (LayerNormalization and SimplifiedLayerNormalization).
    "LayerNormalization": "fp32",
    # nn/instance_norm.cc (commit d7929231823942fc99cd172d7cb413b86e0e5db1) ComputeChannelScaleShiftProgram:
    #   '"  var sum = f32_val_t(0);\n"', '"  var squared_sum = f32_val_t(0);\n"'.
    "InstanceNormalization": "fp32",
}
# The option that changes it: 'enableMatmulFp32Accumulation' (onnxruntime PRs 29599/29611) is read by
# compute_context.h 'inline bool EnableMatmulFp32Accumulation() const' ("Get whether MatMulNBits dot
# products accumulate in f32 rather than in the output element type"): it concerns com.microsoft
# MatMulNBits (4-bit weights) only, which this tool does not convert; the table above holds with it set.
# The WebGPU provider registers float and float16 kernels only (WebGpuSupportedFloatTypes): no BF16.

# The means divide their sum by the count of terms converted to the element type, f16 for an FP16 tensor:
# reduction/reduction_ops.cc (commit 7dc1cd04e8e706ade8feb7464d06d08ecbb0dd80) ReduceSharedProgram,
#   '"  let outputValue = output_value_t(" << (reduce_op_type_ == ReduceOpType::Mean ?
#   "(bestValue / output_element_t(uniforms.reduceSize))" ...' (reduceSize: the product of the reduced
#   dims, a u32 uniform; the naive program, for fewer than 32 terms, divides in f32);
# nn/pool.cc (commit 8b77e058e5a9e82e20a0b50de9618ec70f1faee4; the same at
#   065bfae00cc7595efa2de658ffb4620f6d0c8057) PoolProgram:
#   '"  value /= " << (is_float16_ ? "f16" : "f32") << "(count);\n"', and for a small output over a big
#   window (GlobalAveragePool over H×W) '" / f16(count_shared[0])"'.
# A u32 from 2^16 converts to f16 as infinity (the WebGPU CTS, webgpu/util/math correctlyRoundedF16: values
# from 2^(emax+1) "must be rounded towards the appropriate infinity"; from 65520 to 65535 an implementation
# may give 65504 or inf, IEEE rounding gives inf, as the emulation does): a mean over 65520 or more elements
# is sum/inf = 0 (NaN where the sum overflowed too), whatever the data. 2048 px through a stride-8 feature
# map is 256×256 = 65536 terms: onnxruntime issue 29130's all-zero PP-OCR map above ~2048 px fits this.
# AveragePool divides the same way by its window's count, which no real window reaches: not emulated.
WEBGPU_COUNTS_IN_FP16 = frozenset({"ReduceMean", "GlobalAveragePool"})


@dataclass(frozen=True)
class WebGpuTarget(SumsInFp16):
    @property
    def name(self) -> str:
        return "webgpu"

    @property
    def title(self) -> str:
        return "onnxruntime's WebGPU provider"

    @property
    def accumulation(self) -> Mapping[str, Accumulation]:
        return WEBGPU_ACCUMULATION

    @property
    def counts_in_low(self) -> frozenset[str]:
        return WEBGPU_COUNTS_IN_FP16

    def kernel_blocker(self, node: onnx.NodeProto, low: LowPrecision, opset: int) -> str | None:
        return None if low.cpu_kernels else f"onnxruntime's WebGPU provider has no {low.type_name} kernels"

    @property
    def commands(self) -> Commands:
        return WebGpuCommands(self.low, self.name)


@dataclass(frozen=True)
class WebGpuCommands(NamedCommands):
    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        import onnxruntime as ort

        # --oracle webgpu stops at once where this onnxruntime has no WebGPU provider (the usual builds):
        # the command offered is one that runs here, and the comment says where the native run needs
        if WEBGPU.provider in ort.get_available_providers():
            return (f"{quoted(run.check_args(self.cli_args(), WEBGPU.name))}  # checks it on onnxruntime's "
                    f"{WEBGPU.title} provider as this run judged it")
        return (f"{quoted(run.check_args(self.cli_args()))}  # judges it again as this run did, WebGPU's "
                f"FP16 sums emulated; the native run needs onnxruntime built with {WEBGPU.provider} (not "
                f"this one; then add --oracle {WEBGPU.name}) or onnxruntime-web in a browser")

