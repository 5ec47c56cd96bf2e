"""The OpenVINO GPU target: OpenVINO's Intel GPU plugin, whose OpenCL kernels keep some sums in FP16.

Which op kinds accumulate in FP16 is read from openvinotoolkit/openvino,
``src/plugins/intel_gpu/src/kernel_selector/`` (``kernels/``: the C++ that picks each kernel's
``ACCUMULATOR_TYPE``; ``cl_kernels/``: the OpenCL), read on 2026-11-26 at the commits given per file (the
stored snapshot of each; no release is named). A kernel selector's ``GetAccumulatorType`` that returns
the input's type sums in ``half`` for an FP16 model; one that maps ``Datatype::F16`` to ``Datatype::F32``
sums in ``float``.

On GPUs with XMX units (``engineInfo.supports_immad``: Arc, Data Center GPU Max, Core Ultra's Arc
graphics) the plugin runs Conv, MatMul and FullyConnected on oneDNN instead, whose kernels are not in
this plugin: the table below follows the OpenCL kernels, which the other Intel GPUs (UHD, Iris Xe) run.
A plan that holds on them holds on oneDNN's kernels wherever those sum in FP32 or in FP16.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ..suggested import RunArgs, quoted
from .accumulation import SumsInFp16
from .base import Accumulation
from .commands import Commands, NamedCommands

OPENVINO_GPU_ACCUMULATION: Mapping[str, Accumulation] = {
    # kernels/convolution/convolution_kernel_base.cpp (commit 017e42648f46ff880ea133a2cd6f97995130f516)
    #   ConvolutionKernelBase::GetAccumulatorType: FP32 only where the input or weights are int8
    #   ('we use fp32 accumulator to avoid fp16 overflow'), else 'return params.inputs[0].GetDType();'.
    "Conv": "fp16",
    # kernels/deconvolution/deconvolution_kernel_base.cpp (a stored snapshot, its commit not recorded)
    #   DeconvolutionKernelBase::GetAccumulatorType:
    #   '// for fp32->fp16 accumulate to fp16, otherwise accumulate to input type'.
    "ConvTranspose": "fp16",
    # A MatMul with a constant operand becomes a FullyConnected: kernels/fully_connected/
    # fully_connected_kernel_base.cpp (a stored snapshot, its commit not recorded)
    # FullyConnectedKernelBase::GetAccumulatorType ends 'return in_dt;'
    # (FP32 only for int8 inputs or weights; OpenVINO PR 34704: F16 for F16 inputs). A MatMul of two
    # activations is a Gemm: kernels/gemm/gemm_kernel_tiled_opt.cpp (commit
    # 80f01aeb0e4256d8b919ae6938c8b0b81bf213f7) 'MakeTypeJitConstants(params.inputs[0].GetDType(),
    # "ACCUMULATOR")'. ONNX Gemm is taken to be one of those two (OpenVINO's ONNX frontend builds it from
    # a MatMul; that file was not read).
    "MatMul": "fp16",
    "Gemm": "fp16",
    # cl_kernels/softmax_gpu_bf.cl (commit 0be394150c3ee979162dfd8717041f727a31dbba):
    #   'INPUT0_TYPE my_sum = UNIT_VAL_ZERO;' ... 'INPUT0_TYPE tmp = native_exp(my_chunk[j] - my_maximum);
    #   my_sum += tmp;', reduced in '__local INPUT0_TYPE lg_storage[SLM_SIZE];'; the items-class softmax
    #   kernels: kernels/softmax/softmax_items_class_kernel_base.h (a stored snapshot, commit not recorded)
    #   GetAccumulatorType
    #   'if (params.inputs[0].GetDType() == Datatype::F16) return Datatype::F16;'.
    "Softmax": "fp16",
    # cl_kernels/cum_sum_ref.cl (commit 11ae3055329f536012102e256ad97905bd261f5f):
    #   'INPUT0_TYPE res = INPUT0_VAL_ZERO;' ... 'res += input[ind];'.
    "CumSum": "fp16",
    # Accumulate in FP32:
    # kernels/reduce/reduce_kernel_base.cpp (commit 017e42648f46ff880ea133a2cd6f97995130f516)
    #   ReduceKernelBase::GetAccumulatorType: 'case Datatype::F16: return Datatype::F32;' for every mode but
    #   MAX and MIN, and GetFinalAccumulatorType F32 for MEAN, LOG_SUM_EXP, LOG_SUM, L2, L1.
    "ReduceSum": "fp32",
    "ReduceMean": "fp32",
    "ReduceL1": "fp32",
    "ReduceL2": "fp32",
    "ReduceSumSquare": "fp32",
    "ReduceLogSum": "fp32",
    "ReduceLogSumExp": "fp32",
    # kernels/pooling/pooling_kernel_base.cpp (commit 108c9abbe70ee864d8444dfb8a2e92c9ab1f5a4c)
    #   PoolingKernelBase::GetAccumulatorType: MAX keeps the input type, else 'case Datatype::F16: return
    #   Datatype::F32;' (the 2018-2021 version returned F16 for an F16 input).
    "AveragePool": "fp32",
    "GlobalAveragePool": "fp32",
    # ONNX LayerNormalization, InstanceNormalization and MeanVarianceNormalization become MVN:
    # cl_kernels/mvn_gpu_bfyx_opt.cl (commit 059e82468ef2753f2e7c37e6a0d0fdf8e8f598aa) 'float my_sum = 0.f;'
    #   ... 'float my_var_acc = 0.f;' (and a float Welford pass); the blocked-layout kernel
    #   mvn_gpu_b_fs_yx_fsv16 summed in the activation type, FP16, until OpenVINO PR 35942 (merged
    #   2026-05-15: 'using F32 for MEAN_TYPE and variance-related intermediate buffers'; its test overflowed
    #   at 257×256 = 65 792 elements): releases before it may overflow there, which this table does not
    #   follow (--target fp16-accumulate does).
    "LayerNormalization": "fp32",
    "InstanceNormalization": "fp32",
    "MeanVarianceNormalization": "fp32",
}
# Not read, so not listed (the emulation computes them in FP32): LogSoftmax, RMSNormalization.


@dataclass(frozen=True)
class OpenVinoGpuTarget(SumsInFp16):
    @property
    def name(self) -> str:
        return "openvino-gpu"

    @property
    def title(self) -> str:
        return "OpenVINO's GPU plugin"

    @property
    def accumulation(self) -> Mapping[str, Accumulation]:
        return OPENVINO_GPU_ACCUMULATION

    @property
    def counts_in_low(self) -> frozenset[str]:
        # its means are reductions and pools, which divide in FP32 (GetFinalAccumulatorType above)
        return frozenset()

    @property
    def commands(self) -> Commands:
        return OpenVinoGpuCommands(self.low, self.name)


@dataclass(frozen=True)
class OpenVinoGpuCommands(NamedCommands):
    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        # onnxruntime's OpenVINO provider (OpenVINOExecutionProvider, device GPU) is a separate build
        # (onnxruntime-openvino) and no --oracle here runs it: the command offered judges it as this run did
        return (f"{quoted(run.check_args(self.cli_args()))}  # judges it again as this run did, OpenVINO "
                f"GPU's FP16 sums emulated; the native run needs OpenVINO on an Intel GPU (or onnxruntime "
                f"built with OpenVINOExecutionProvider, device GPU)")
