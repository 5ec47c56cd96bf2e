"""Float64 compute on the targets that sum in FP16 (webgpu, fp16-accumulate, openvino-gpu): the overflow
checks, the accumulation bounds and the mean rewrites work in the type of the tensor they are on, so a
float64 branch is converted, analysed and checked as its float32 twin is. Each stopped with an
InternalError before ('Type (tensor(float)) ... expected tensor(double)': float32 constants, rounding
pairs and bound outputs in a float64 graph)."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.float_types import FP16
from onnx_precision.oracle.accumulated import AccumulationBounds
from onnx_precision.oracle.sessions import make_session
from onnx_precision.target import target_named
from onnx_precision.target.sum_rewrite import marked, sum_rewrite

TARGETS = ("webgpu", "fp16-accumulate", "openvino-gpu")
WIDTH = 2048
_BRANCH = ("mean", "sum", "matmul", "softmax")
_TYPES = {"32": (TensorProto.FLOAT, np.float32), "64": (TensorProto.DOUBLE, np.float64)}


def _twins() -> onnx.ModelProto:
    """The same branch on x (names ending 32) and on x cast to float64 (ending 64): ReduceMean, ReduceSum,
    MatMul by ones and Softmax over rows of 2048."""
    nodes = [helper.make_node("Cast", ["x"], ["x64"], "to64", to=TensorProto.DOUBLE)]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "axis")]
    outputs = []
    for tag, (elem, dtype) in _TYPES.items():
        src = "x" if tag == "32" else "x64"
        nodes += [helper.make_node("ReduceMean", [src], [f"mean{tag}_y"], f"mean{tag}", axes=[-1]),
                  helper.make_node("ReduceSum", [src, "axis"], [f"sum{tag}_y"], f"sum{tag}"),
                  helper.make_node("MatMul", [src, f"w{tag}"], [f"matmul{tag}_y"], f"matmul{tag}"),
                  helper.make_node("Softmax", [src], [f"softmax{tag}_y"], f"softmax{tag}")]
        inits.append(numpy_helper.from_array(np.ones((WIDTH, 4), dtype), f"w{tag}"))
        outputs += [helper.make_tensor_value_info(f"{n}{tag}_y", elem, s) for n, s in
                    (("mean", [4, 1]), ("sum", [4, 1]), ("matmul", [4, 4]), ("softmax", [4, WIDTH]))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])
    model = helper.make_model(helper.make_graph(nodes, "twins", [x], outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feed() -> np.ndarray:
    # ±64 in turn: every sum is 0, every Σ|x| 2048·64 = 131072, past 65504
    return np.where(np.arange(4 * WIDTH) % 2, 64.0, -64.0).astype(np.float32).reshape(4, WIDTH)


def _unprobed(text: str) -> str:
    return re.sub(r" \(probe \d+\)", "", text)  # the probe that found it: the twins' may differ


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("twins")
    model, data = str(tmp / "m.onnx"), str(tmp / "x.npz")
    onnx.save(_twins(), model)
    np.savez(data, x=_feed())
    return tmp, model, data


@pytest.mark.parametrize("target", TARGETS)
def test_a_float64_branch_is_converted_analysed_and_checked_as_its_float32_twin(paths, target, capsys):
    tmp, model, data = paths
    out, plan = str(tmp / f"{target}.onnx"), str(tmp / f"{target}.plan.json")
    assert main(["convert", model, "-o", out, "--inputs", data, "--target", target, "-q",
                 "--save-plan", plan]) == 0
    with open(plan, encoding="utf-8") as f:
        nodes = json.load(f)["nodes"]

    def decision(name: str) -> tuple[str, list[str]]:
        reasons = nodes[name]["reasons"]
        return nodes[name]["precision"], [_unprobed(f"{r['source']}: {r['detail']}") for r in reasons]

    for name in _BRANCH:  # a float64 node's statements are its float32 twin's, with its names
        precision, reasons = decision(name + "64")
        assert (precision, [r.replace("64_y", "32_y") for r in reasons]) == decision(name + "32"), name
    # the float64 sums' accumulators pass 65504 where the runtime sums in FP16, as their twins' do
    pinned = {"sum", "matmul"} if target != "openvino-gpu" else {"matmul"}
    assert {n for n in _BRANCH if nodes[n + "64"]["precision"] == "fp32"} == pinned
    found = "search: un-pinning it fails: output 'matmul64_y' 16 new NaN/Inf"
    assert decision("matmul64") == ("fp32", [found])
    written = onnx.load(out)
    by_name = {n.name: n for n in written.graph.node}
    if target != "openvino-gpu":  # written in FP16 as ReduceSum(x·2^-11), as the float32 mean is
        assert [by_name[f"mean{tag}"].op_type for tag in _TYPES] == ["ReduceSum", "ReduceSum"]
        scale = {n.output[0]: n for n in written.graph.node}["mean64__scale"].attribute[0].t
        assert (scale.data_type, float(numpy_helper.to_array(scale))) == (TensorProto.FLOAT16, 2.0 ** -11)
    results = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": _feed()})
    assert all(np.isfinite(r).all() for r in results)

    capsys.readouterr()
    assert main(["analyze", model, "--inputs", data, "--target", target]) == 0
    rows = {line.split()[0]: line.split(None, 2)[2] for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] and line.split()[0] in {n + t for n in _BRANCH for t in _TYPES}}
    assert {n for n in rows if n.endswith("64")} == {n.replace("32", "64") for n in rows if n.endswith("32")}
    for name in _BRANCH:
        assert rows.get(name + "64") == rows.get(name + "32"), name
    assert main(["check", model, out, "--inputs", data, "--target", target, "-q"]) == 0


@pytest.mark.parametrize("target", TARGETS)
def test_the_float64_accumulation_bounds_are_measured_as_their_float32_twins(target):
    ctx = dataclasses.replace(ModelContext.of(_twins()), target=target_named(target))
    bounds = AccumulationBounds(ctx).measure([{"x": _feed()}])
    twins = {name: bound for name, bound in bounds.items() if name.endswith("32")}
    assert {name.replace("32", "64"): bound for name, bound in twins.items()} == \
        {name: bound for name, bound in bounds.items() if name.endswith("64")}
    # the mean's Σ|x| passes 65504 as the sum's; Σexp(x - max) counts the 1024 terms at the maximum
    summed = {"matmul32": 131072.0, "softmax32": 1024.0}
    if target != "openvino-gpu":
        summed.update(mean32=131072.0, sum32=131072.0)
    assert twins == summed


def _spelled(node: onnx.NodeProto, tag: str, shape: list, target: str, inits=()) -> onnx.ModelProto:
    """``node`` in FP16 as ``target`` computes it, in the type of ``tag`` (its input x, output y)."""
    elem, dtype = _TYPES[tag]
    inits = [numpy_helper.from_array(np.asarray(v, dtype if np.asarray(v).dtype.kind == "f" else None), k)
             for k, v in inits]
    x = helper.make_tensor_value_info("x", elem, shape)
    y = helper.make_tensor_value_info("y", elem, None)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    taken: set[str] = set()

    def fresh(base: str) -> str:
        name = base
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    spelling = target_named(target).emulation.spelling(model, "", None, fresh)
    model.graph.ClearField("node")
    model.graph.node.extend(spelling.spell(node, FP16))
    return model


CASES = {  # op -> (node, x's shape, initializers, x)
    "ReduceMean": (helper.make_node("ReduceMean", ["x"], ["y"], "n", axes=[1]), [2, "N"], (),
                   np.abs(_feed()[:2]) * [[1], [0.25]]),
    "Softmax": (helper.make_node("Softmax", ["x"], ["y"], "n"), [1, "N"], (), np.zeros((1, 70000))),
    "LayerNormalization": (helper.make_node("LayerNormalization", ["x", "s"], ["y"], "n"), [2, WIDTH],
                           (("s", np.ones(WIDTH)),), _feed()[:2] / np.array([[1], [64]])),
    "CumSum": (helper.make_node("CumSum", ["x", "a"], ["y"], "n"), [1, WIDTH], (("a", np.array(1)),),
               np.abs(_feed()[:1])),
}


@pytest.mark.parametrize("op", CASES)
def test_a_float64_node_is_emulated_in_float64_as_its_float32_twin(op):
    node, shape, inits, x = CASES[op]
    results = {tag: make_session(_spelled(node, tag, shape, "fp16-accumulate", inits), "").run(
        None, {"x": x.astype(dtype)})[0] for tag, (_, dtype) in _TYPES.items()}
    assert results["64"].dtype == np.float64
    np.testing.assert_allclose(results["64"], results["32"], rtol=1e-6)
    expected = {"ReduceMean": [np.inf, 16.0], "Softmax": 0.0}  # the first row's Σ|x| passes 65504
    if op in expected:
        assert results["64"].ravel().tolist()[:2] == np.broadcast_to(expected[op], 2).tolist()
    if op == "CumSum":  # the running Σ|x| passes 65520 at its 1024th term
        assert np.isinf(results["64"]).sum() == WIDTH - 1023


@pytest.mark.parametrize("width", [WIDTH, "N"])  # N: its scales computed at run time
def test_a_float64_mean_written_as_its_rewrite_is_emulated_in_float64_as_its_float32_twin(width):
    node = helper.make_node("ReduceMean", ["x"], ["y"], "n", axes=[1])
    x = np.abs(_feed()[:2]) * np.array([[1], [0.3]], np.float32)
    rewrite = sum_rewrite(node, helper.make_tensor_type_proto(TensorProto.DOUBLE, [2, width]), {})
    assert rewrite is not None
    results = {tag: make_session(_spelled(marked(node, rewrite), tag, [2, width], "webgpu"), "").run(
        None, {"x": x.astype(dtype)})[0] for tag, (_, dtype) in _TYPES.items()}
    assert results["64"].dtype == np.float64  # x·2^-11 sums to 64 at most: the mean holds
    assert results["64"].ravel().tolist() == results["32"].ravel().tolist() == [64.0, 19.203125]


def _decomposed_layer_norm(tag: str, width: int = 256) -> onnx.ModelProto:
    """A LayerNorm spelled as nine nodes on x, or on x cast to float64 (tag "64")."""
    elem, dtype = _TYPES[tag]
    src = "x" if tag == "32" else "x64"
    nodes = [helper.make_node("Cast", ["x"], ["x64"], "to64", to=elem)] if tag == "64" else []
    nodes += [helper.make_node("ReduceMean", [src], ["m"], "mean", axes=[-1]),
              helper.make_node("Sub", [src, "m"], ["d"], "sub"),
              helper.make_node("Pow", ["d", "two"], ["d2"], "pow"),
              helper.make_node("ReduceMean", ["d2"], ["v"], "var", axes=[-1]),
              helper.make_node("Add", ["v", "eps"], ["ve"], "add_eps"),
              helper.make_node("Sqrt", ["ve"], ["s"], "sqrt"),
              helper.make_node("Div", ["d", "s"], ["n"], "div"),
              helper.make_node("Mul", ["n", "g"], ["ng"], "gamma"),
              helper.make_node("Add", ["ng", "b"], ["y"], "beta")]
    inits = [numpy_helper.from_array(np.asarray(v, dtype), k) for k, v in
             (("two", 2.0), ("eps", 1e-5), ("g", np.linspace(0.5, 1.5, width)), ("b", np.zeros(width)))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])
    graph = helper.make_graph(nodes, "ln", [x], [helper.make_tensor_value_info("y", elem, [4, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_float64_layer_norm_is_written_prescaled_as_its_float32_twin(tmp_path):
    # Σx² over rows of 256 deviations ~900 passes 65504: fp16-accumulate writes the LayerNormalization on
    # x·2^-6, its search and verification emulating that form (in float64 for the float64 LayerNorm)
    written = {}
    for tag in _TYPES:
        model, out = str(tmp_path / f"ln{tag}.onnx"), str(tmp_path / f"ln{tag}.fp16.onnx")
        onnx.save(_decomposed_layer_norm(tag), model)
        assert main(["convert", model, "-o", out, "--input-range", "x:-900,900",
                     "--target", "fp16-accumulate", "-q"]) == 0
        nodes = {n.name: n for n in onnx.load(out).graph.node}
        epsilon = next(a.f for a in nodes["beta"].attribute if a.name == "epsilon")
        scale = numpy_helper.to_array(nodes["beta__prescale_by__node"].attribute[0].t)
        written[tag] = (nodes["beta"].op_type, epsilon, scale.dtype, float(scale))
        x = np.random.default_rng(0).uniform(-900, 900, (4, 256)).astype(np.float32)
        y = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert np.isfinite(y).all()
    assert written["64"] == written["32"] == ("LayerNormalization", np.float32(1e-5 * 2.0 ** -12), np.float16,
                                              2.0 ** -6)


def test_a_float64_layer_norm_written_as_one_fp16_node_is_not_said_to_stay_float64(tmp_path, capsys):
    # its pins (pow, var, add_eps, sqrt) are written inside an FP16 LayerNormalization: the summary said
    # '4 node(s) compute in float64 ... and stay float64: pow (rule), var (range), ...'
    model, out = str(tmp_path / "ln64.onnx"), str(tmp_path / "ln64.fp16.onnx")
    onnx.save(_decomposed_layer_norm("64"), model)
    assert main(["convert", model, "-o", out, "--input-range", "x:-900,900"]) == 0
    printed = capsys.readouterr().out
    assert "pow (range/rule; counted with 'beta', FP16 in the written file)" in printed
    assert "compute in float64" not in printed


def test_under_keep_float64_a_float64_layer_norm_keeps_its_nodes(tmp_path, capsys):
    # it was written as one LayerNormalization with stash_type 1, its statistics in FP32
    model, out = str(tmp_path / "ln64.onnx"), str(tmp_path / "ln64.fp16.onnx")
    onnx.save(_decomposed_layer_norm("64"), model)
    assert main(["convert", model, "-o", out, "--input-range", "x:-900,900", "--keep-float64"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "FP16: 0/10 nodes (0.0%), 0.0% of estimated FLOPs" in printed  # it read '-0.0%'
    assert not any("LayerNormalization" in line for line in printed)
    written = onnx.load(out)
    given = _decomposed_layer_norm("64")
    assert [n.op_type for n in written.graph.node] == [n.op_type for n in given.graph.node]
    x = np.random.default_rng(0).uniform(-900, 900, (4, 256)).astype(np.float32)
    y = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.dtype == np.float64 and np.array_equal(y, expected)
