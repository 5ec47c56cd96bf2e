"""TensorRT flags: exact layer names, only float layers, both TensorRT generations, problems written not
raised."""

from __future__ import annotations

import shlex

import onnx
import pytest
from conftest import parse

from onnx_precision.graph import name_nodes
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.suggested import RunArgs
from onnx_precision.trt import trt_flags, trt_flags_text
from onnx_precision.trt.versions import V

TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y, int64[2] shape) {
    shape = Shape(x)
    k = Constant<value = float {2.0}>()
    sq = Mul(x, x)
    ss = ReduceSum<keepdims = 1>(sq, axes)
    norm = Sqrt(ss)
    scaled = Mul(x, k)
    y = Div(scaled, norm)
}
"""


def model_and_plan(fp32_nodes):
    model = parse(TEXT.replace("(sq, axes)", "(sq)"))
    name_nodes(model)
    ops = [n.name for n in model.graph.node]
    plan = uniform_plan(ops, Precision.FP16, Reason("default", "all-fp16")).with_fp32(fp32_nodes)
    return model, plan


def test_flags_name_only_fp32_float_layers_exactly():
    model, plan = model_and_plan(["node_of_ss", "node_of_norm", "node_of_shape", "node_of_k"])
    flags = trt_flags(model, plan)
    # Shape (integer output) and Constant (weights, not a layer) are not float layers.
    assert flags.layer_precisions == (("node_of_ss", "fp32"), ("node_of_norm", "fp32"))
    assert flags.layer_output_types == (("node_of_ss", ("fp32",)), ("node_of_norm", ("fp32",)))
    assert flags.problems == ()
    assert flags.weakly_typed_args() == [
        "--fp16", "--precisionConstraints=obey",
        "--layerPrecisions=node_of_ss:fp32,node_of_norm:fp32",
        "--layerOutputTypes=node_of_ss:fp32,node_of_norm:fp32",
    ]


def test_all_low_plan_gives_plain_fp16_flag():
    model, plan = model_and_plan([])
    assert trt_flags(model, plan).weakly_typed_args() == ["--fp16"]


TOPK = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x, int64[1] k) => (float[2] v, int64[2] i) {
    v, i = TopK(x, k)
}
"""


def test_multi_output_layer_lists_each_output_type_where_trtexec_takes_int64():
    model = parse(TOPK)
    name_nodes(model)
    plan = uniform_plan(["node_of_v"], Precision.FP32, Reason("user", "test"))
    assert trt_flags(model, plan).layer_output_types == (("node_of_v", ("fp32", "int64")),)
    assert trt_flags(model, plan, version=V("9.1")).layer_output_types == (("node_of_v", ("fp32", "int64")),)


def test_trtexec_8_6_gets_no_int64_output_type_and_the_file_says_so():
    model = parse(TOPK)
    name_nodes(model)
    plan = uniform_plan(["node_of_v"], Precision.FP32, Reason("user", "test"))
    flags = trt_flags(model, plan, version=V("8.6"))
    assert flags.layer_precisions == (("node_of_v", "fp32"),)
    assert flags.layer_output_types == ()
    assert flags.problems == (("node 'node_of_v' (TopK): trtexec before 9.1 rejects int64 and bool in "
                               "--layerOutputTypes, so its output types are left to TensorRT"),)
    lines = trt_flags_text(model, plan, RunArgs("m.onnx", "o.onnx")).splitlines()
    assert lines[1] == ("# TensorRT 8.6 to 9.0 (weakly typed; these flags are deprecated in 10.12 and "
                        "removed in 11.0).")
    assert lines[3] == ("trtexec --onnx=m.onnx --fp16 --precisionConstraints=obey "
                        "--layerPrecisions=node_of_v:fp32")
    assert lines[4].startswith("#   not expressed: node 'node_of_v' (TopK): trtexec before 9.1 rejects")
    assert lines[5] == ("# TensorRT 9.1 to 10.11 (weakly typed; these flags are deprecated in 10.12 and "
                        "removed in 11.0).")
    assert lines[6] == ("trtexec --onnx=m.onnx --fp16 --precisionConstraints=obey "
                        "--layerPrecisions=node_of_v:fp32 --layerOutputTypes=node_of_v:fp32+int64")


def test_colon_in_a_name_is_fine_comma_and_quote_are_written_down_not_raised():
    model, _ = model_and_plan([])
    model.graph.node[4].name = "norm:0"
    model.graph.node[6].name = "out,y"
    plan = uniform_plan([n.name for n in model.graph.node], Precision.FP16, Reason("d", "")).with_fp32(
        ["norm:0", "out,y"])
    flags = trt_flags(model, plan)
    # trtexec splits "name:precision" on the last ':'.
    assert flags.layer_precisions == (("norm:0", "fp32"),)
    assert flags.problems == (
        ("node 'out,y' (Div) cannot be named in trtexec's flags: its name contains ',': trtexec splits the "
         "list on ','; rename it in the model, or build the Cast-pinned model with --stronglyTyped "
         "(TensorRT 9.0 and later) instead"),)
    text = trt_flags_text(model, plan, RunArgs("m.onnx", "o.onnx"))
    assert "#   not expressed: node 'out,y' (Div) cannot be named in trtexec's flags" in text
    # Polygraphy takes one name per argument: it can name both.
    convert = next(line for line in text.splitlines() if line.startswith("polygraphy convert m.onnx"))
    assert shlex.split(convert)[7:9] == ["norm:0:float32", "out,y:float32"]


def test_text_has_both_generations_with_comments():
    model, plan = model_and_plan(["node_of_norm"])
    text = trt_flags_text(model, plan, RunArgs("in dir/model.onnx", "out.onnx",
                                                  sample_shapes={"x": [(2, 4), (8, 4), (2, 4)]}))
    assert text.splitlines()[1:3] == [
        "# Shape profile: 'x' min the samples' smallest, opt the samples' most common, max the samples' "
        "largest.",
        "# An engine built on a range read off the samples rejects every shape outside it: give the "
        "deployment's with --trt-min-shapes/--trt-opt-shapes/--trt-max-shapes."]
    lines = [line for i, line in enumerate(text.splitlines()) if i not in (1, 2)]
    assert lines[0] == "# onnx-precision: TensorRT flags for 1 node(s) pinned to FP32."
    assert lines[1].startswith("# TensorRT 8.6 to 10.11 (weakly typed")
    assert shlex.split(lines[3]) == [
        "trtexec", "--onnx=in dir/model.onnx", "--fp16", "--precisionConstraints=obey",
        "--layerPrecisions=node_of_norm:fp32", "--layerOutputTypes=node_of_norm:fp32",
        "--minShapes=x:2x4", "--optShapes=x:2x4", "--maxShapes=x:8x4"]
    assert lines[4].startswith("# TensorRT 9.0 and later, strongly typed (the way from 10.12, the only one "
                               "in 11.x)")
    assert lines[5] == ("trtexec --onnx=out.onnx --stronglyTyped --minShapes=x:2x4 --optShapes=x:2x4 "
                        "--maxShapes=x:8x4")
    assert lines[6] == ("# Polygraphy: the same pins by exact layer name (it has no patterns; names as "
                        "TensorRT 10.11 gives them):")
    assert shlex.split(lines[7]) == [
        "polygraphy", "convert", "in dir/model.onnx", "--fp16", "--precision-constraints", "obey",
        "--layer-precisions", "node_of_norm:float32", "--trt-min-shapes", "x:[2,4]", "--trt-opt-shapes",
        "x:[2,4]", "--trt-max-shapes", "x:[8,4]", "-o", "in dir/model.engine"]
    assert lines[8] == ("polygraphy convert out.onnx --strongly-typed --trt-min-shapes 'x:[2,4]' "
                        "--trt-opt-shapes 'x:[2,4]' --trt-max-shapes 'x:[8,4]' -o out.engine")
    # the verdict: the tool's own check of the written model on TensorRT, then Polygraphy's closest
    assert lines[9].startswith("# Check the written model built by TensorRT with the verdict the conversion "
                               "used")
    assert shlex.split(lines[10]) == ["onnx-precision", "check", "in dir/model.onnx", "out.onnx", "--oracle",
                                      "tensorrt"]
    assert lines[11].startswith("# Polygraphy's closest check: SNR >= 26.02 dB is rel RMS err <= 0.05 over "
                                "each whole output; it has no per-slice bound")
    assert shlex.split(lines[12]) == [
        "polygraphy", "run", "in dir/model.onnx", "--onnxrt", "--trt", "--fp16", "--precision-constraints",
        "obey", "--layer-precisions", "node_of_norm:float32", "--trt-min-shapes", "x:[2,4]",
        "--trt-opt-shapes", "x:[2,4]", "--trt-max-shapes", "x:[8,4]", "--input-shapes", "x:[2,4]",
        "--compare", "snr", "--snr-threshold", "26.02"]
    assert len(lines) == 13


def test_the_polygraphy_snr_check_agrees_with_the_whole_output_bound():
    """SNR (first runner's output as the signal) >= 26.02 dB is exactly rel RMS err <= 0.05."""
    import numpy as np
    from polygraphy.comparator.compare import SnrCompareFunc

    ref = np.linspace(-3, 3, 4096, dtype=np.float32)
    noise = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    noise *= np.linalg.norm(ref) / np.linalg.norm(noise)
    for rel in (0.049, 0.051):
        snr = SnrCompareFunc()._compute_metric(ref, ref + rel * noise)
        assert (snr >= 26.02) == (rel <= 0.05)


def test_a_verdict_polygraphy_cannot_express_says_so_and_gives_the_tools_own_check():
    from onnx_precision.data import SampleSpec
    from onnx_precision.judge import Tolerance
    from onnx_precision.options import Judging

    model, plan = model_and_plan(["node_of_norm"])
    text = trt_flags_text(model, plan, RunArgs("m.onnx", "o.onnx", SampleSpec("d.npz"),
                                               Judging(Tolerance(error_stat="max", atol=0.01)),
                                               sample_shapes={"x": [(2, 4)]}))
    lines = text.splitlines()
    assert shlex.split(lines[-2]) == ["onnx-precision", "check", "m.onnx", "o.onnx", "--inputs", "d.npz",
                                      "--error-stat", "max", "--atol", "0.01", "--oracle", "tensorrt"]
    assert lines[-1].startswith("# Polygraphy has no check that agrees with this one: its max check passes")
    assert "polygraphy run" not in text


def test_dynamic_input_without_sample_shapes_is_written_down():
    model, plan = model_and_plan(["node_of_norm"])
    text = trt_flags_text(model, plan, RunArgs("m.onnx", "o.onnx"))
    assert ("#   not expressed: input 'x' has dynamic dimensions and no sample shapes were given: add "
            "--minShapes/--optShapes/--maxShapes for it") in text.splitlines()


def test_fp16_io_gives_io_formats_per_input_and_output():
    model = parse(TOPK)
    name_nodes(model)
    plan = uniform_plan(["node_of_v"], Precision.FP16, Reason("default", "all-fp16"), fp16_io=True)
    assert trt_flags(model, plan).weakly_typed_args() == [
        "--fp16", "--inputIOFormats=fp16:chw,int64:chw", "--outputIOFormats=fp16:chw,int64:chw"]
    # 8.6's parser turns INT64 I/O into INT32.
    assert trt_flags(model, plan, version=V("8.6")).weakly_typed_args() == [
        "--fp16", "--inputIOFormats=fp16:chw,int32:chw", "--outputIOFormats=fp16:chw,int32:chw"]
    text = trt_flags_text(model, plan, RunArgs("m.onnx", "o.onnx"))
    assert ("polygraphy convert m.onnx --fp16 --tensor-datatypes x:float16 v:float16 -o m.engine"
            in text.splitlines())


def test_a_given_profile_is_written_in_every_line_and_said_to_be_given():
    model, plan = model_and_plan(["node_of_norm"])
    given = {"x": {"min": (1, 4), "opt": (4, 4), "max": (64, 4)}}
    text = trt_flags_text(model, plan, RunArgs("m.onnx", "o.onnx", trt_profile=given,
                                               sample_shapes={"x": [(2, 4)]}))
    assert text.splitlines()[1] == "# Shape profile: 'x' min, opt, max as given."
    trtexec = [line for line in text.splitlines() if line.startswith("trtexec")]
    assert trtexec and all("--minShapes=x:1x4 --optShapes=x:4x4 --maxShapes=x:64x4" in line
                           for line in trtexec)
    polygraphy = [line for line in text.splitlines() if line.startswith("polygraphy")]
    assert polygraphy and all("--trt-max-shapes 'x:[64,4]'" in line for line in polygraphy)


def test_a_profile_that_does_not_fit_the_model_is_refused():
    from onnx_precision.errors import UsageError
    from onnx_precision.trt.flags import check_given_profile

    model, _ = model_and_plan(["node_of_norm"])
    check_given_profile(model, {"x": {"min": (1, 4), "max": (8, 4)}})
    with pytest.raises(UsageError, match=r"^--trt-\*-shapes y: the model has no input 'y' \(inputs: x\)$"):
        check_given_profile(model, {"y": {"max": (8, 4)}})
    with pytest.raises(UsageError, match=r"^--trt-max-shapes x:8x5: the model's input is \?x4$"):
        check_given_profile(model, {"x": {"max": (8, 5)}})
    with pytest.raises(UsageError, match=r"min 9x4, max 8x4: each must be <= the next"):
        check_given_profile(model, {"x": {"min": (9, 4), "max": (8, 4)}})


def test_the_profile_options_take_polygraphy_and_trtexec_spellings(tmp_path, capsys):
    from onnx_precision.cli import main

    model, _ = model_and_plan(["node_of_norm"])
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    flags = str(tmp_path / "f.txt")
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16", "--trt-flags", flags,
                 "--trt-min-shapes", "x:[1,4]", "--optShapes=x:2x4", "--trt-max-shapes", "x:[16,4]"]) == 0
    text = open(flags).read()
    assert "--minShapes=x:1x4 --optShapes=x:2x4 --maxShapes=x:16x4" in text and "as given" in text
    assert main(["convert", path, "-o", str(tmp_path / "p.onnx"), "--mode", "all-fp16", "--trt-flags", flags,
                 "--trt-max-shapes", "x:[16,5]"]) == 2
    assert capsys.readouterr().err.strip().endswith("--trt-max-shapes x:16x5: the model's input is ?x4")

