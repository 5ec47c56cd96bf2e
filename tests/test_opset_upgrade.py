"""A BF16 run raises the model's opset where its ops have no bfloat16 type (Conv: 22, Cast: 13), verifies
the raised FP32 model against the original, and says so; --keep-opset refuses instead."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.convert import ConvertOptions, convert_model
from onnx_precision.float_types import BF16
from onnx_precision.target import target_named

CNN_NOTE = ("opset 17 -> 22 so that Conv takes bfloat16 (onnx's version converter); the upgraded FP32 "
            "model matches the original on the samples (bit-identical) and is the FP32 reference; the "
            "written model is at opset 22")


def _cnn(path: str, opset: int = 17) -> str:
    """Two named Convs and a Relu, 1x2x8x8 in and out."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.normal(0, 0.3, (2, 2, 3, 3)).astype(np.float32), f"w{i}")
               for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv_b", pads=[1, 1, 1, 1])]
    model = helper.make_model(helper.make_graph(nodes, "cnn", [x], [y], weights),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, path)
    return path


def _output_types(model: onnx.ModelProto) -> dict[str, int]:
    """Node name -> the element type of its first output."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.output)}
    return {n.name: types.get(n.output[0], 0) for n in inferred.graph.node}


def test_a_cnn_at_opset_17_is_raised_to_22_and_its_convs_are_written_in_bf16(tmp_path, capsys):
    model, out = _cnn(str(tmp_path / "cnn.onnx")), str(tmp_path / "o.onnx")
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--low-precision", "bf16",
                 "--target", "tensorrt"]) == 0
    assert f"note: {CNN_NOTE}" in capsys.readouterr().out.splitlines()
    written = onnx.load(out)
    assert [(o.domain, o.version) for o in written.opset_import] == [("", 22)]
    computed = _output_types(written)
    assert computed["conv_a"] == computed["conv_b"] == computed["relu"] == TensorProto.BFLOAT16


def test_a_cnn_the_target_has_no_bf16_conv_for_is_not_raised_and_the_summary_says_why(tmp_path, capsys):
    # onnxruntime's CUDA provider has no BF16 Conv at any opset: raising the opset would gain nothing
    model, out = _cnn(str(tmp_path / "cnn.onnx")), str(tmp_path / "o.onnx")
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--low-precision", "bf16"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert notes[0] == ("note: 2 node(s) cannot be BF16 (98.6% of estimated FLOPs) and stay FP32: 2 node(s) "
                        "(98.6%): onnxruntime's CUDA provider has no bfloat16 Conv kernel")
    assert onnx.load(out).opset_import[0].version == 17


def relu_at_opset_11(path: str) -> str:
    """A one-Relu model importing opset 11 (below BF16's Cast opset), saved at ``path``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), path)
    return path


def test_a_model_at_opset_11_is_raised_instead_of_refused(tmp_path, capsys):
    path = relu_at_opset_11(str(tmp_path / "old.onnx"))
    for flags in (["--low-precision", "bf16"], ["--fallback", "bf16"]):
        out = str(tmp_path / "o.onnx")
        assert main(["convert", path, "-o", out, "--mode", "static", *flags]) == 0
        report = json.load(open(str(tmp_path / "o.report.json")))
        assert report["notes"][0] == (
            "opset 11 -> 13 so that Cast, Relu take bfloat16 (onnx's version converter); the upgraded FP32 "
            "model matches the original on the samples (bit-identical) and is the FP32 reference; the "
            "written model is at opset 13" if flags[0] == "--low-precision" else
            "opset kept at 11: no node went BF16 (the plan was measured on the model raised to opset 13, "
            "which matches it on the samples; the model written at opset 11 is verified as always)")
        assert f"note: {report['notes'][0]}" in capsys.readouterr().out.splitlines()
        # the fallback's Relu passes in FP16: nothing needs the raised opset
        assert onnx.load(out).opset_import[0].version == (13 if flags[0] == "--low-precision" else 11)


def test_keep_opset_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    model = _cnn(str(tmp_path / "cnn.onnx"))
    for command in (["convert", model, "-o", str(tmp_path / "o.onnx")], ["analyze", model]):
        assert main([*command, "--low-precision", "bf16", "--target", "tensorrt", "--keep-opset"]) == 2
        assert capsys.readouterr().err.strip() == (
            f"onnx-precision: error: {model}: --keep-opset: BF16 needs ai.onnx opset 22 for Conv and the "
            f"model imports opset 17 (without --keep-opset the model is upgraded and verified)")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx"]
    # FP16 needs nothing raised: --keep-opset changes nothing there
    assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16", "--keep-opset"]) == 0


def _plan_of(tmp_path, model: str, *flags: str) -> dict:
    plan = str(tmp_path / "plan.json")
    assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16", "--low-precision",
                 "bf16", "--target", "tensorrt", "--save-plan", plan, *flags]) == 0
    return json.load(open(plan))["nodes"]


def test_an_upgrade_that_does_not_match_the_original_is_not_used_and_the_note_says_why(tmp_path, capsys,
                                                                                        monkeypatch):
    convert_version = onnx.version_converter.convert_version

    def changed(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
        upgraded = convert_version(model, opset)
        w = upgraded.graph.initializer[0]
        w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) * np.float32(1.001), w.name))
        return upgraded

    monkeypatch.setattr(onnx.version_converter, "convert_version", changed)
    model = _cnn(str(tmp_path / "cnn.onnx"))
    nodes = _plan_of(tmp_path, model)
    assert [nodes[n]["precision"] for n in ("conv_a", "relu", "conv_b")] == ["fp32", "bf16", "fp32"]
    assert nodes["conv_a"]["reasons"][-1] == {"source": "type", "detail": "Conv-11 schema: T allows no "
                                                                          "tensor(bfloat16)"}
    out = capsys.readouterr().out
    assert ("note: no opset 17 -> 22 upgrade: the upgraded FP32 model does not match the original on the "
            "samples (y: max rel err 0.001, over 1e-06); the nodes of Conv stay FP32 (no bfloat16 type at "
            "opset 17)") in out.splitlines()
    assert onnx.load(str(tmp_path / "o.onnx")).opset_import[0].version == 17


def test_a_converter_failure_is_a_note_not_a_traceback(tmp_path, capsys, monkeypatch):
    def fails(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
        raise RuntimeError("No Adapter For Conv\nsecond line")

    monkeypatch.setattr(onnx.version_converter, "convert_version", fails)
    nodes = _plan_of(tmp_path, _cnn(str(tmp_path / "cnn.onnx")))
    assert nodes["conv_a"]["precision"] == "fp32"
    assert ("note: no opset 17 -> 22 upgrade: onnx's version converter fails: No Adapter For Conv; the "
            "nodes of Conv stay FP32 (no bfloat16 type at opset 17)") in capsys.readouterr().out.splitlines()


def test_the_in_memory_conversion_raises_the_opset_too(tmp_path):
    model = onnx.load(_cnn(str(tmp_path / "cnn.onnx")))
    options = ConvertOptions(mode="all-fp16", target=target_named("tensorrt", low=BF16))
    result = convert_model(model, options=options)
    assert result.rewrite.notes[0] == CNN_NOTE
    assert result.model.opset_import[0].version == 22
    assert result.plan.precision("conv_a") == "bf16"
    assert model.opset_import[0].version == 17  # the caller's model is left as it was


def test_a_model_with_external_data_is_raised_and_its_bf16_weights_are_written_beside_it(tmp_path, capsys):
    model = onnx.load(_cnn(str(tmp_path / "src.onnx")))
    path, out = str(tmp_path / "ext.onnx"), str(tmp_path / "o.onnx")
    onnx.save(model, path, save_as_external_data=True, location="ext.data", size_threshold=0)
    assert main(["convert", path, "-o", out, "--mode", "static", "--low-precision", "bf16", "--target",
                 "tensorrt", "--external-data", "-q"]) == 0
    written = onnx.load(out)
    assert written.opset_import[0].version == 22
    assert [(w.name, w.data_type) for w in written.graph.initializer] == [("w1", TensorProto.BFLOAT16),
                                                                          ("w2", TensorProto.BFLOAT16)]
    notes = json.load(open(str(tmp_path / "o.report.json")))["notes"]
    assert notes[0].startswith("opset 17 -> 22 so that Conv")


def test_the_version_converter_sees_no_large_weight_and_the_raised_model_keeps_every_weight(tmp_path, capsys,
                                                                                           monkeypatch):
    # the converter copies what it is given several times over (a 26 MB model: 150 MB more at its peak)
    convert_version = onnx.version_converter.convert_version
    seen: list[int] = []

    def spied(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
        seen.append(max(len(t.raw_data) for t in model.graph.initializer))
        return convert_version(model, opset)

    monkeypatch.setattr(onnx.version_converter, "convert_version", spied)
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.1, (16, 16, 3, 3)).astype(np.float32)  # 9 KB
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                              "conv", [x], [y], [onnx.numpy_helper.from_array(w, "w")])
    path, out = str(tmp_path / "conv.onnx"), str(tmp_path / "o.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["convert", path, "-o", out, "--mode", "all-fp16", "--low-precision", "bf16",
                 "--target", "tensorrt"]) == 0
    assert seen == [0]  # the 9 KB weight went through as a placeholder, its bytes held back
    assert "(bit-identical)" in capsys.readouterr().out  # the raised model ran on the real weight
    written = onnx.load(out)
    assert written.opset_import[0].version == 22
    [weight] = written.graph.initializer
    assert weight.data_type == TensorProto.BFLOAT16 and not weight.external_data
    np.testing.assert_allclose(onnx.numpy_helper.to_array(weight).astype(np.float32), w, rtol=2 ** -8)
