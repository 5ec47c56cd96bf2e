"""Which ONNX ops have BF16 kernels: onnxruntime's CUDA execution provider and TensorRT's ONNX parser.

Plain data transcribed from the sources cited beside each table (onnxruntime v1.22.1; onnx-tensorrt
release/10.1-GA), read on 2026-11-24, and two look-ups over it. Where two sources disagree the tables take
the answer that keeps a node out of BF16: a missing entry only costs speed, a wrong one breaks the build.
"""

from __future__ import annotations

from collections.abc import Mapping

# ---------------------------------------------------------------------------------------------------------
# onnxruntime, CUDA execution provider
#
# Source: microsoft/onnxruntime, tag v1.22.1 (commit 89746dc19a0a1ae59ebf4b16df9acab8f99f3925, "Cherry
# Picks into rel-1.22.1 (#25157)", 2025-06-27; VERSION_NUMBER 1.22.1). The snapshot of microsoft/onnxruntime
# itself was too large to fetch, so this was read from the ROCm/onnxruntime mirror, which carries the
# upstream release tags. A kernel exists only if it is listed in the table that registers kernels:
#   onnxruntime/core/providers/cuda/cuda_execution_provider.cc, RegisterCudaKernels(), line 1461
#     "static const BuildKernelCreateInfoFn function_table[] = {"
# Kernels that are registered per type show BFloat16 in the class name, e.g. line 2180:
#     "BuildKernelCreateInfo<ONNX_OPERATOR_TYPED_KERNEL_CLASS_NAME(kCudaExecutionProvider, kOnnxDomain, 13,
#      BFloat16, Softmax)>,"
# Kernels registered once for many types give their types in the op's own .cc file, e.g.
#   onnxruntime/core/providers/cuda/tensor/transpose.cc:28
#     '.TypeConstraint("T", DataTypeImpl::AllFixedSizeTensorTypes()),'
# and AllFixedSizeTensorTypes includes BFloat16 (onnxruntime/core/framework/element_type_lists.h,
# "using AllFixedSizeIRv4 = TypeList<float, double, ... MLFloat16, BFloat16, bool>"). So do
# AllTensorTypes, AllNumericTensorTypes and the *AndSequenceTensorTypes lists. AllIEEEFloatTensorTypes does
# not: it is "TypeList<float, double, MLFloat16>".
#
# Each value is the lowest ai.onnx since-version that has a registered BF16 kernel. For every op here the
# BF16 kernels then run without a gap to an open-ended registration, so "opset >= value" is the test.
# The one exception is Scatter, which exists only up to opset 10.
ORT_CUDA_BF16: Mapping[str, int] = {
    # Registered per type in cuda_execution_provider.cc ("..., kOnnxDomain, 13, BFloat16, Abs)>," etc.)
    "Abs": 13,
    "Add": 13,  # 13..13 and 14 ("kOnnxDomain, 14, BFloat16, Add)>,", line 2266)
    "Cast": 13,  # input BFloat16 from 13 (13..18, 19); tensor/cast_op.cc CastOpTypeConstraints() lets
    #              any version's *output* be BFloat16
    "Div": 13,
    "Erf": 13,
    "Exp": 13,
    "Gemm": 13,
    "LayerNormalization": 17,  # "kOnnxDomain, 17, BFloat16, LayerNormalization)>,"; for 1..16 see below
    "MatMul": 13,
    "Mul": 13,
    "Neg": 13,
    "ReduceSum": 13,  # the only Reduce* op with a registered BF16 kernel
    "Relu": 13,
    "Sigmoid": 13,
    "Sign": 13,
    "Softmax": 13,
    "Sqrt": 13,
    "Sub": 13,
    "Tanh": 13,
    "Where": 16,  # 9..15 is registered for MLFloat16/float/double_t/int32_t/int64_t/uint8_t only
    # Registered once, with BFloat16 in the op file's type list
    "Dropout": 13,  # nn/dropout.cc:49 'BuildKernelDefConstraints<MLFloat16, float, double, BFloat16>()'
    "GatherND": 13,  # tensor/gather_nd.cc:120 'BuildKernelDefConstraints<float, MLFloat16, double, int64_t,
    #                  BFloat16, bool>()'; 11 and 12 lack BFloat16
    "IsInf": 20,  # math/unary_elementwise_ops_impl.h:143 "#define ISINF_OPSET20_ALL_FLOATS float, double,
    #               MLFloat16, BFloat16, Float8E4M3FN, ..." (10..19 is float and double only)
    "IsNaN": 13,  # unary_elementwise_ops_impl.h:157 "#define ISNAN_OPSET13_FLOATS float, double, MLFloat16,
    #               BFloat16"
    "Max": 6,  # math/variadic_elementwise_ops.cc:253 "#define UZILHFD_TYPES uint32_t, uint64_t, int32_t,
    "Min": 6,  # int64_t, MLFloat16, float, double, BFloat16"; :254 "#define HFD_TYPES MLFloat16, float,
    "Sum": 6,  # double, BFloat16" (ONNX itself admits bfloat16 for these only from opset 13)
    "Mod": 13,  # math/binary_elementwise_ops.cc:455 'BuildKernelDefConstraints<int32_t, int64_t, uint32_t,
    #             uint64_t, float, double, MLFloat16, BFloat16>()'
    "Tile": 13,  # tensor/tile.cc:40 "DataTypeImpl::GetTensorType<BFloat16>()})" (6..12 lacks it)
    # Data movement: the op file's type constraint is AllFixedSizeTensorTypes(IRv9) or AllTensorTypes
    "Compress": 9,  # tensor/compress.cc
    "Concat": 4,  # tensor/concat.cc
    "ConstantOfShape": 9,  # generator/constant_of_shape.cc ("T2")
    "Expand": 8,  # tensor/expand.cc
    "Flatten": 1,  # tensor/flatten.cc
    "Gather": 1,  # tensor/gather.cc
    "GatherElements": 11,  # tensor/gather_elements.cc
    "Identity": 1,  # tensor/identity_op.cc
    "Reshape": 1,  # tensor/reshape.cc:90 '.TypeConstraint("T", DataTypeImpl::AllFixedSizeTensorTypesIRv9())'
    "ReverseSequence": 10,  # tensor/reverse_sequence.cc
    "Scatter": 9,  # tensor/scatter_elements.cc (Scatter is 9..10 only)
    "ScatterElements": 11,  # tensor/scatter_elements.cc
    "ScatterND": 11,  # tensor/scatter_nd.cc
    "Shape": 1,  # tensor/shape_op.cc
    "Size": 1,  # tensor/size.cc (AllTensorTypes)
    "Slice": 1,  # tensor/slice.cc, registered per index type, data "T" AllFixedSizeTensorTypes
    "Split": 2,  # tensor/split.cc
    "Squeeze": 1,  # tensor/squeeze.cc
    "Transpose": 1,  # tensor/transpose.cc
    "Trilu": 14,  # tensor/trilu.cc
    "Unsqueeze": 1,  # tensor/unsqueeze.cc
    # Control flow and sequences: carry any fixed-size tensor ("V"/"S"/"T" constraints)
    "If": 1,  # controlflow/if.cc
    "Loop": 1,  # controlflow/loop.cc
    "Scan": 8,  # controlflow/scan.cc
    "ConcatFromSequence": 11,  # tensor/sequence_op.cc
    "SequenceAt": 11,
    "SequenceConstruct": 11,
    "SequenceEmpty": 11,
    "SequenceErase": 11,
    "SequenceInsert": 11,
    "SequenceLength": 11,
}

# ai.onnx-domain kernels that v1.22.1 registers from its contrib table
# (onnxruntime/contrib_ops/cuda/cuda_contrib_kernels.cc, absent from builds with DISABLE_CONTRIB_OPS):
# line 350 "BuildKernelCreateInfo<CUDA_ONNX_OP_VERSIONED_TYPED_CLASS_NAME(1, 16, BFloat16_float_BFloat16,
# LayerNormalization)>," and line 356 "...CUDA_ONNX_OP_TYPED_CLASS_NAME(1, BFloat16_float_BFloat16,
# SimplifiedLayerNormalization)>," (CUDA_ONNX_OP_* expand to kOnnxDomain).
ORT_CUDA_BF16_ONNX_DOMAIN_CONTRIB: Mapping[str, int] = {
    "LayerNormalization": 1,
    "SimplifiedLayerNormalization": 1,
}

# com.microsoft ops with a registered BF16 CUDA kernel in v1.22.1, all since version 1. Source: the same
# contrib table, e.g. line 246 "BuildKernelCreateInfo<CUDA_MS_OP_TYPED_CLASS_NAME(1, BFloat16, FastGelu)>,".
# Ops registered once take their types from their own file: math/bias_gelu.cc:15 'BuildKernelDefConstraints<
# MLFloat16, float, double, BFloat16>()' (likewise math/bias_dropout.cc:53, math/bitmask_dropout.cc:13),
# math/gemm_float8.cc:18 "BuildKernelDefConstraints<Float8E4M3FN, Float8E5M2, MLFloat16, BFloat16, float>()",
# tensor/trilu.cc:18 (AllFixedSizeTensorTypes), tensor/unfold.cc:23 (AllTensorTypes).
# Registered, but not for BF16 (so not here): Attention, MultiHeadAttention, SkipLayerNormalization,
# SkipSimplifiedLayerNormalization, BiasSoftmax, GroupNorm, MatMulNBits, QuickGelu, ...
ORT_CUDA_BF16_CONTRIB: frozenset[str] = frozenset({
    "BiasDropout", "BiasGelu", "BitmaskBiasDropout", "BitmaskDropout", "FastGelu", "FusedMatMul", "Gelu",
    "GemmFloat8", "GroupQueryAttention", "MatMulBnb4", "RotaryEmbedding", "SparseAttention",
    "TransposeMatMul", "Trilu", "UnfoldTensor",
})

# ORT replaces Constant nodes with initializers when it loads a graph, so they need no kernel at all:
# onnxruntime/core/graph/graph.cc (v1.22.1) line 1238 "// Put the 'TensorProto' stored in the 'Constant'
# nodes attribute into the graphs initializer list", line 1275 "// Remove constant nodes as they're
# replaced with initializers above."
ORT_FOLDED_AT_LOAD: frozenset[str] = frozenset({"Constant"})

# For reference only; the look-ups do not consult these.
# BF16 kernel classes that v1.22.1 compiles but leaves out of RegisterCudaKernels' table, so they are not
# registered: math/binary_elementwise_ops.cc:298 "BINARY_OP_HFD(PRelu, 16)" and :565
# "BINARY_LOGICALOP_REGISTER_UZILHFD(Equal, 13)" (both macros add BFloat16), reduction/reduction_ops.cc:856
# "REGISTER_KERNEL_TYPED_AXES_INPUT_WITH_VERSIONED(ReduceMean, BFloat16, 17, 18)", tensor/gelu.cc:26
# "REGISTER_KERNEL_TYPED(BFloat16)". They could appear in a later release.
ORT_CUDA_BF16_COMPILED_NOT_REGISTERED: frozenset[str] = frozenset({
    "Equal", "Gelu", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "PRelu", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceMean", "ReduceProd", "ReduceSumSquare",
})
# BF16 registrations that main adds after v1.22.1 (ROCm/onnxruntime main, commit
# 6ac4f7666aa4d90cab36c0544acd7140f696fe29, 2025-07-23, VERSION_NUMBER 1.23.0): cuda_execution_provider.cc
# "+ BuildKernelCreateInfo<ONNX_OPERATOR_TYPED_KERNEL_CLASS_NAME(kCudaExecutionProvider, kOnnxDomain, 23,
# BFloat16_BFloat16, RMSNormalization)>," and the com.microsoft ones in cuda_contrib_kernels.cc
# ("+ BuildKernelCreateInfo<CUDA_MS_OP_TYPED_CLASS_NAME(1, BFloat16, MatMulNBits)>," ...).
ORT_CUDA_BF16_AFTER_1_22: Mapping[str, int] = {"RMSNormalization": 23, "RotaryEmbedding": 23}
ORT_CUDA_BF16_CONTRIB_AFTER_1_22: frozenset[str] = frozenset({
    "MatMulNBits", "PagedAttention", "QuickGelu", "SkipSimplifiedLayerNormalization",
})

# ---------------------------------------------------------------------------------------------------------
# TensorRT ONNX parser
#
# Source: onnx/onnx-tensorrt, tag release/10.1-GA (commit 96e781103cfc4adf4a6bb557e94bac8e693f6f4c,
# "ONNX-TensorRT 10.1 GA release (#975)", 2024-06-17; the newest in the stored snapshot), docs/operators.md.
# Its header still says line 5 "TensorRT 10.0 supports operators in the inclusive range of opset 9 to
# opset 20." The "Supported Types" column is read per row, e.g. line 188
#     "| Softmax                   | Y          | FP32, FP16, BF16 |"
# TRT_BF16_DOC_OPS: every supported row whose column lists BF16 (139 rows).
TRT_BF16_DOC_OPS: frozenset[str] = frozenset({
    "Abs", "Acos", "Acosh", "Add", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh", "AveragePool",
    "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Concat", "Constant",
    "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum", "DepthToSpace", "Div", "Dropout",
    "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "GRU", "Gather",
    "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool",
    "Greater", "GreaterOrEqual", "GroupNormalization", "HardSigmoid", "HardSwish", "Hardmax", "Identity",
    "If", "ImageScaler", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM", "LayerNormalization",
    "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "Loop", "LpNormalization", "LpPool",
    "MatMul", "Max", "MaxPool", "Mean", "MeanVarianceNormalization", "Min", "Mod", "Mul", "Neg", "OneHot",
    "PRelu", "Pad", "ParametricSoftplus", "Pow", "QuantizeLinear", "RNN", "RandomNormal",
    "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range", "Reciprocal", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Resize", "ReverseSequence", "Round", "ScaledTanh",
    "Scan", "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign",
    "Sin", "Sinh", "Size", "Slice", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt",
    "Squeeze", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu",
    "Unsqueeze", "Upsample", "Where",
})

# Rows that list BF16 although the importer in the same commit (onnxOpImporters.cpp) rejects it:
#   line 2096 (GlobalLpPool) "ASSERT_NODE((inputType == DataType::kFLOAT || inputType == DataType::kHALF),"
#   line 2681 (InstanceNormalization) "ASSERT_NODE((inputDataType == DataType::kFLOAT || inputDataType ==
#             DataType::kHALF),"
#   line 3262 (LpNormalization), line 3333 (LpPool) "ASSERT_NODE((dt == DataType::kFLOAT || dt ==
#             DataType::kHALF),"
TRT_BF16_IMPORTER_REJECTS: frozenset[str] = frozenset({
    "GlobalLpPool", "InstanceNormalization", "LpNormalization", "LpPool",
})

# The ops TensorRT takes with BF16 tensors: listed BF16 by the doc and not rejected by the importer (135).
TRT_BF16_OPS: frozenset[str] = TRT_BF16_DOC_OPS - TRT_BF16_IMPORTER_REJECTS

# Supported ops that take FP16 but not BF16: they must not be planned BF16. The doc's FP16-only rows are
# line 121 "| Mish                      | Y          | FP32, FP16 |" and DeformConv, GridSample,
# NonMaxSuppression, NonZero, RoiAlign. The importer (line 6408) would accept BF16 for NonZero; the doc
# says no, and it stays here.
TRT_NO_BF16_OPS: frozenset[str] = frozenset({
    "DeformConv", "GridSample", "Mish", "NonMaxSuppression", "NonZero", "RoiAlign",
}) | TRT_BF16_IMPORTER_REJECTS

_ONNX_DOMAINS = ("", "ai.onnx")


def ort_cuda_has_bf16(op_type: str, domain: str, opset: int) -> bool:
    """Whether onnxruntime's CUDA provider (v1.22.1) registers a BF16 kernel for this node.

    ``opset`` is the model's import version of the node's domain. com.microsoft ops have one version.
    """
    if domain in _ONNX_DOMAINS:
        if op_type in ORT_FOLDED_AT_LOAD:
            return True
        for table in (ORT_CUDA_BF16, ORT_CUDA_BF16_ONNX_DOMAIN_CONTRIB):
            since = table.get(op_type)
            if since is not None and opset >= since:
                return True
        return False
    if domain == "com.microsoft":
        return op_type in ORT_CUDA_BF16_CONTRIB
    return False


def trt_has_bf16(op_type: str) -> bool:
    """Whether TensorRT's ONNX parser (10.x) takes this ai.onnx op with BF16 tensors."""
    return op_type in TRT_BF16_OPS
