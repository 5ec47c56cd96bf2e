"""Every share and count a run states is true of the file it writes (issue 23).

:func:`audit` is the checker: it converts a model, reads the written model back, and compares each
node's precision in it with the plan JSON, and the summary's counts (nodes, Casts, initializers) and
shares (the summary's, the chosen trade-off point's, the JSON's) with what the written file holds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx
import pytest
from conftest import parse
from onnx import TensorProto
from test_quantized import qdq_conv, qdq_mlp
from test_quantized_dynamic import dynamic_block

from models import generate
from onnx_precision import quantized
from onnx_precision.cli import main
from onnx_precision.context import load_model
from onnx_precision.report import from_json

_PRECISIONS = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT: "fp32",
               TensorProto.DOUBLE: "fp64"}


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every subgraph in it (If/Loop/Scan bodies), outermost first."""
    out = [graph]
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out += _graphs(sub)
    return out


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in _graphs(model.graph) for n in g.node]


def written_precisions(model: onnx.ModelProto) -> dict[str, str]:
    """Node (subgraphs' too) -> what it computes in, as the written file types it: the type of its
    first float output (of its first float input where no output is float); nodes with no float value
    are left out."""
    graphs = _graphs(onnx.shape_inference.infer_shapes(model).graph)
    types = {v.name: v.type.tensor_type.elem_type for g in graphs
             for v in list(g.input) + list(g.value_info) + list(g.output) if v.type.HasField("tensor_type")}
    types.update({i.name: i.data_type for g in graphs for i in g.initializer})
    out = {}
    for node in (n for g in graphs for n in g.node):
        for value in list(node.output) + list(node.input):
            if types.get(value) in _PRECISIONS:
                out[node.name] = _PRECISIONS[types[value]]
                break
    return out


def computing(model: onnx.ModelProto) -> set[str]:
    """The nodes of ``model`` that compute in a float type, the ones a plan's counts and shares count: a
    node with a float value (:func:`written_precisions`) but a Constant (a value, as an initializer is),
    Shape and Size (they read a tensor's shape, not its values). A precision planned for any other
    node (an int64 Mul, a Shape) states nothing of the file."""
    values = {n.name: n.op_type for n in _nodes(model)}
    return {n for n in written_precisions(model) if values[n] not in ("Constant", "Shape", "Size")}


def _computed_in(original: onnx.ModelProto, written: onnx.ModelProto) -> dict[str, str]:
    """Original node -> the written node that computes it: itself, or, for a node the rewriter fused
    away (a decomposed LayerNorm's), the first node downstream of it that the written file keeps."""
    kept = {n.name for n in _nodes(written)}
    consumers: dict[str, list[str]] = {}
    for node in _nodes(original):
        for value in node.input:
            consumers.setdefault(value, []).append(node.name)
    outputs = {n.name: list(n.output) for n in _nodes(original)}
    out = {}
    for name in outputs:
        frontier, seen = [name], set()
        while frontier and frontier[0] not in kept:
            current = frontier.pop(0)
            seen.add(current)
            frontier += [c for v in outputs.get(current, ()) for c in consumers.get(v, ()) if c not in seen]
        if frontier:
            out[name] = frontier[0]
    return out


def written_share(original: onnx.ModelProto, written: onnx.ModelProto, flops: Mapping[str, float],
                  apart: Collection[str] = ()) -> float:
    """The 16-bit share of the estimated FLOPs ``flops`` (per original node) as the written file
    computes them, the nodes ``apart`` (quantized compute) left out. A node fused into a
    LayerNormalization counts in its type, the type it reads and writes, as ``check`` counts the file
    (its statistics, FP32 by stash_type 1 on the generic target, are computed inside it)."""
    precisions = written_precisions(written)
    computed_in = _computed_in(original, written)
    low = total = 0.0
    for node, f in flops.items():
        if node in apart:
            continue
        total += f
        seen = precisions.get(computed_in.get(node, node))
        low += f if seen in ("fp16", "bf16") else 0.0
    return low / total if total else 0.0


def audit(tmp_path, model: str, data: str, *flags: str) -> list[str]:
    """Convert ``model`` on ``data`` with ``flags``; every statement of the run that the written file
    contradicts, as a line ("" when all hold)."""
    stem = os.path.join(str(tmp_path), "o")
    argv = ["convert", model, "-o", stem + ".onnx", "--inputs", data, "--save-plan", stem + ".plan.json",
            *flags]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    if not os.path.exists(stem + ".onnx"):
        return [] if code in (1, 2) else [f"exit {code} and no model written"]
    lines = printed.getvalue().splitlines()
    written = onnx.load(stem + ".onnx")
    loaded = load_model(model)  # its nodes named as the tool names them
    original = loaded.model
    float_compute = computing(original)
    with open(stem + ".plan.json", encoding="utf-8") as f:
        plan = {n: d["precision"] for n, d in json.load(f)["nodes"].items() if n in float_compute}
    report = None
    if os.path.exists(stem + ".report.json"):
        with open(stem + ".report.json", encoding="utf-8") as f:
            report = json.load(f)
    wrong: list[str] = []
    names = {n.name for n in _nodes(original)}
    precisions = written_precisions(written)
    by_name = {n.name: n for n in _nodes(written)}
    for node, precision in plan.items():
        if node not in by_name:
            continue  # fused into another node (a LayerNormalization), or a subgraph's
        seen = precisions.get(node)
        if seen is not None and seen != precision and not (seen == "fp64" and precision == "fp32"):
            wrong.append(f"plan says {node} is {precision}, written {seen}")
    computed_in = _computed_in(original, written)
    apart = quantized.of(loaded).compute  # quantized compute: no node count or share counts it
    # each counted node in what the written file computes it in: a fused node in its LayerNormalization's
    # type, a node that reads a graph input as written (ArgMax) in that input's
    kinds = [precisions.get(computed_in.get(n, n), p) for n, p in plan.items() if n not in apart]
    wrong += _counts(lines[0] if lines else "", kinds, original, written, names)
    wrong += _apart(lines[0] if lines else "", apart)
    wrong += _pins(lines, report, precisions)
    if report is not None:
        flops = {n: v["flops"] or 0.0 for n, v in report["nodes"].items()}
        wrong += _shares(lines, report, written_share(original, written, flops, apart))
        wrong += _node_shares(lines, report, kinds, apart)
    return wrong


def _apart(first: str, apart: Collection[str]) -> list[str]:
    """The summary's first line's "(14 quantized node(s) apart)" against the model's quantized compute."""
    said = re.search(r"\((\d+) quantized node\(s\) apart\)", first)
    if (int(said.group(1)) if said else 0) != len(apart):
        return [f"summary says {said.group(1) if said else 'no'} quantized nodes apart, the model has "
                f"{len(apart)}"]
    return []


def _pins(lines: Sequence[str], report: Mapping | None, precisions: Mapping[str, str]) -> list[str]:
    """Each FP32 pin the summary names ("FP32 pins (2): a (type), ...") and the JSON lists, against the
    written file: FP32 there (or fused into another node)."""
    pins_line = next((line for line in lines if line.startswith("FP32 pins (")), "")
    named = re.findall(r"(?:: |, )([^ ,(]+) \(", pins_line.split(", ... ")[0])
    named += [p["node"] for p in report["pinned"]] if report is not None else []
    return [f"{name} is named an FP32 pin, the written model has it {precisions[name]}"
            for name in dict.fromkeys(named) if precisions.get(name, "fp32") not in ("fp32", "fp64")]


def _counts(first: str, kinds: Sequence[str], original: onnx.ModelProto, written: onnx.ModelProto,
            names: set[str]) -> list[str]:
    """The summary's first line against the written file: node counts (``kinds``: each counted node's
    precision in the written file), Casts, initializers."""
    wrong = []
    said = dict((kind, int(n)) for n, kind in re.findall(r"(\d+) (?:node\(s\) )?(FP16|BF16|FP32)\b", first))
    for kind in ("FP16", "BF16", "FP32"):
        seen = sum(1 for p in kinds if p == kind.lower() or (kind == "FP32" and p == "fp64"))
        if said.get(kind, 0) != seen:
            wrong.append(f"summary says {said.get(kind, 0)} {kind} node(s), the written model has {seen}")
    casts = re.search(r"(\d+) Cast\(s\) added", first)
    added = sum(1 for n in _nodes(written) if n.op_type == "Cast" and n.name not in names)
    if casts and int(casts.group(1)) != added:
        wrong.append(f"summary says {casts.group(1)} Cast(s) added, the written model has {added} new")
    before = {i.name: i.data_type for i in original.graph.initializer}
    after = {i.name: i.data_type for i in written.graph.initializer}
    converted = sum(1 for name, t in after.items() if name in before and before[name] != t)
    both = sum(1 for name in after if name not in before)
    said_converted = re.search(r"(\d+) initializer\(s\) converted", first)
    if said_converted and int(said_converted.group(1)) != converted:
        wrong.append(f"summary says {said_converted.group(1)} initializer(s) converted, the written model "
                     f"has {converted} whose type changed")
    said_both = re.search(r"(\d+) kept in both precisions", first)
    if said_both and int(said_both.group(1)) != both:
        wrong.append(f"summary says {said_both.group(1)} kept in both precisions, the written model has "
                     f"{both} new initializer(s)")
    return wrong


def _node_shares(lines: Sequence[str], report: Mapping, kinds: Sequence[str], apart: Collection[str],
                 ) -> list[str]:
    """The summary's "FP16: 8/9 nodes" ("2/2 non-quantized nodes" of a quantized model) and the JSON's
    node counts against ``kinds``, each counted node's precision in the written file, the quantized
    compute ``apart`` left out."""
    wrong = []
    low, fp16 = sum(1 for p in kinds if p in ("fp16", "bf16")), kinds.count("fp16")
    of = "non-quantized nodes" if apart else "nodes"
    share_line = next((line for line in lines if re.match(_SHARE_LINE, line)), "")
    said = re.match(r"[^:]+: (\d+)/(\d+) ([a-z-]+ )?nodes", share_line)
    if said is None and report["fp16_share"]:
        wrong.append("the summary states no node count its pattern reads")
    elif said and (int(said.group(1)), int(said.group(2)), f"{said.group(3) or ''}nodes") != (
            low, len(kinds), of):
        wrong.append(f"summary says {said.group(1)}/{said.group(2)} {said.group(3) or ''}nodes 16-bit, the "
                     f"written model has {low}/{len(kinds)} {of}")
    stated = report["fp16_share"]
    counts = (stated["16bit_nodes"], stated["fp16_nodes"], stated["total_nodes"]) if stated else None
    if counts is not None and counts != (low, fp16, len(kinds)):
        wrong.append(f"the JSON says {stated['16bit_nodes']} 16-bit, {stated['fp16_nodes']} FP16 of "
                     f"{stated['total_nodes']} nodes, the written model has {low}, {fp16} of {len(kinds)}")
    if stated and apart and (stated.get("quantized_nodes"), stated.get("nodes_of")) != (
            len(apart), "the non-quantized nodes that compute in a float type"):
        wrong.append(f"the JSON says its node counts are of {stated.get('nodes_of')!r}, "
                     f"{stated.get('quantized_nodes')} quantized nodes apart; the model has {len(apart)}")
    return wrong


_SHARE_LINE = r"(FP16|BF16|16-bit): \d+/\d+ (non-quantized )?nodes"


def _shares(lines: Sequence[str], report: Mapping, share: float) -> list[str]:
    """The summary's, the JSON's and the chosen point's 16-bit share against ``share``, the written
    file's."""
    wrong = []
    share_line = next((line for line in lines if re.match(_SHARE_LINE, line)), "")
    said = re.search(r"nodes \([\d.]+%\), ([\d.]+)% of", share_line)
    if said and abs(float(said.group(1)) - 100 * share) > 0.051:
        wrong.append(f"summary says {said.group(1)}% 16-bit, the written model has {100 * share:.2f}%")
    stated = report["fp16_share"]["flops"] if report["fp16_share"] else None
    if stated is not None and abs(stated - share) > 1e-6:
        wrong.append(f"the JSON says {100 * stated:.2f}% 16-bit, the written model has {100 * share:.2f}%")
    tradeoff = report["tradeoff"]
    chosen = next((p for p in tradeoff["points"] if p["point"] == tradeoff["chosen"]), None)
    if chosen is not None and abs(chosen["fp16_flop_share"] - share) > 1e-6:
        wrong.append(f"the chosen point {chosen['point']} says {100 * chosen['fp16_flop_share']:.2f}% "
                     f"16-bit, the written model has {100 * share:.2f}%")
    return wrong


# --- the examples ----------------------------------------------------------------------------------

RUNS = {"generic": (), "tensorrt": ("--target", "tensorrt"), "bf16": ("--low-precision", "bf16"),
        "fallback": ("--fallback", "bf16", "--target", "tensorrt")}


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("name", ["layernorm_eps", "if_branch", "t5_ffn"])
def test_every_count_and_share_a_run_states_is_true_of_the_written_model(tmp_path, name, run):
    assert audit(tmp_path, generate.model_path(name), generate.data_path(name), *RUNS[run]) == []


@pytest.mark.parametrize("run", ["generic", "tensorrt", "bf16", "all-fp16"])
def test_every_count_share_and_pin_of_a_quantize_dynamic_run_is_true_of_the_written_model(tmp_path, run):
    # the DynamicQuantizeLinear, MatMulInteger and dequantization nodes are quantized compute: before, the
    # summary counted them in "FP16: 2/13 nodes" and "11 FP32" and named the DynamicQuantizeLinear as pins
    path, data = dynamic_block(tmp_path)
    flags = {**RUNS, "all-fp16": ("--mode", "all-fp16")}[run]
    assert audit(tmp_path, path, data, *flags) == []


def _report(tmp_path) -> dict:
    with open(tmp_path / "o.report.json", encoding="utf-8") as f:
        return json.load(f)


def _chosen(report: Mapping) -> Mapping:
    return next(p for p in report["tradeoff"]["points"] if p["point"] == report["tradeoff"]["chosen"])


def test_the_chosen_points_share_is_that_of_the_plan_with_its_layer_norm_pins(tmp_path):
    # under TensorRT the epsilon FP16 flushes pins the statistics, so the one LayerNormalization
    # written is FP32: the point measured with only the epsilon pinned is 0% FP16, as written (was 99.8%)
    model, data = generate.model_path("layernorm_eps"), generate.data_path("layernorm_eps")
    assert audit(tmp_path, model, data, "--target", "tensorrt") == []
    report = _report(tmp_path)
    assert report["fp16_share"]["flops"] == _chosen(report)["fp16_flop_share"] == 0.0
    assert _chosen(report)["pinned"] == ["ln_add_eps"]
    with open(tmp_path / "o.report.md", encoding="utf-8") as f:
        assert "| **0 (chosen)** | 0.0% | 7.479e-08 | yes | `ln_add_eps` |" in f.read().splitlines()


def test_a_fallback_epsilon_inside_a_layer_norm_goes_bf16_with_its_layer_norm(tmp_path):
    # the BF16 fallback moved the epsilon (which FP16 flushes) to BF16, but its LayerNorm is written as
    # one FP32 node: the plan said BF16 and the summary 0.2% 16-bit of a model that has none. The
    # epsilon is tried with its whole LayerNorm (search.fallback), written as one BF16 node
    model, data = generate.model_path("layernorm_eps"), generate.data_path("layernorm_eps")
    assert audit(tmp_path, model, data, "--target", "tensorrt", "--fallback", "bf16") == []
    with open(tmp_path / "o.plan.json", encoding="utf-8") as f:
        assert json.load(f)["nodes"]["ln_add_eps"]["precision"] == "bf16"
    report = _report(tmp_path)
    assert report["fp16_share"]["flops"] == _chosen(report)["fp16_flop_share"] == 1.0


def test_a_quantized_models_points_picture_json_and_gate_count_the_summarys_share(tmp_path, capsys):
    # the two MatMuls are 16384 of 19584 FLOPs (INT8); relu0 (128) kept FP32 leaves 96.0% of the
    # 3200 others 16-bit, where all FLOPs would give 99.3% and pass --min-16bit-share 97
    path = str(tmp_path / "mlp.onnx")
    onnx.save(qdq_mlp(19), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--keep-fp32", "relu0",
                 "--min-16bit-share", "97"]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].endswith(": failed (16-bit share 96.0% of the non-quantized FLOPs is below "
                               "--min-16bit-share 97)")
    assert ("FP16: 10/11 non-quantized nodes (90.9%), 96.0% of the non-quantized estimated FLOPs; 83.7% of "
            "all FLOPs are INT8") in printed
    report = _report(tmp_path)
    assert report["fp16_share"]["flops"] == pytest.approx(0.96)
    assert report["fp16_share"]["flops_of"] == "the non-quantized estimated FLOPs"
    assert [p["fp16_flop_share"] for p in report["tradeoff"]["points"]] == [pytest.approx(0.96)]
    assert report["quantized"] == {"matmul0": "INT8", "matmul1": "INT8"}
    assert from_json(report).low_flop_share() == pytest.approx(0.96)  # read back, the same share
    with open(tmp_path / "o.report.md", encoding="utf-8") as f:
        markdown = f.read()
    assert "| point | FP16 share of the non-quantized estimated FLOPs | worst error |" in markdown
    with open(tmp_path / "o.report.tradeoff.svg", encoding="utf-8") as f:
        assert ">FP16 share of the non-quantized estimated FLOPs</text>" in f.read()


def test_the_gate_reads_the_share_of_all_flops_in_a_model_without_quantized_compute(tmp_path, capsys):
    model, data = generate.model_path("t5_ffn"), generate.data_path("t5_ffn")
    assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--inputs", data,
                 "--min-16bit-share", "60"]) == 1
    assert capsys.readouterr().out.splitlines()[1].endswith(
        ": failed (16-bit share 50.0% of FLOPs is below --min-16bit-share 60)")


@pytest.mark.parametrize("flags", [("--keep-opset",), ("--low-precision", "bf16")])
def test_a_dequantize_linear_whose_opset_fixes_its_output_to_float32_is_planned_fp32(tmp_path, flags):
    # at opset 13 the DequantizeLinear after the Relu (no quantized group: it feeds a pool) outputs
    # float32 whatever the plan says; it was planned FP16/BF16 and counted 16-bit (47.8% for 31.9%)
    path, data = str(tmp_path / "conv.onnx"), str(tmp_path / "x.npz")
    onnx.save(qdq_conv(13), path)
    np.savez(data, x=np.random.default_rng(0).uniform(0, 1, (1, 8, 16, 16)).astype(np.float32))
    assert audit(tmp_path, path, data, *flags) == []
    with open(tmp_path / "o.plan.json", encoding="utf-8") as f:
        reasons = json.load(f)["nodes"]["dq_y"]["reasons"]
    assert reasons[-1]["detail"].startswith("DequantizeLinear outputs float32 only at this opset (a ")


def test_the_checker_reads_each_nodes_precision_from_the_written_types():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) {
            xh = Cast <to = 10> (x)
            r = Relu (xh)
            rf = Cast <to = 1> (r)
            y = Neg (rf)
        }""")
    for node, name in zip(model.graph.node, ("c1", "relu", "c2", "neg")):
        node.name = name
    assert written_precisions(model) == {"c1": "fp16", "relu": "fp16", "c2": "fp32", "neg": "fp32"}


# --- nodes that compute in no float type -----------------------------------------------------------

def _saved(tmp_path, model: onnx.ModelProto, x: np.ndarray) -> tuple[str, str]:
    """``model`` and a feed of its input ``x`` saved in tmp_path."""
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "m.npz")
    onnx.save(model, path)
    np.savez(data, x=x)
    return path, data


def _printed(tmp_path, path: str, data: str, *flags: str) -> list[str]:
    """What ``convert`` prints of ``path`` (to tmp_path/again.onnx)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["convert", path, "-o", str(tmp_path / "again.onnx"), "--inputs", data, *flags])
    return printed.getvalue().splitlines()


def test_a_shape_computation_is_no_16_bit_node_of_the_counts_or_the_share(tmp_path):
    # Shape -> ReduceProd -> Mul computes the Reshape's target in int64: planned FP16 with every node,
    # they were counted so ("FP16: 6/6 nodes", 100.0%), the Shape at its input's 128 FLOPs, where the
    # written file computes them in no float type (its 16-bit share of those FLOPs: 66.15%)
    path, data = _saved(tmp_path, parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2,64] x) => (float[128] y) <float[1] half = {0.5}> {
            s = Shape (x)
            p = ReduceProd <keepdims = 1> (s)
            one = Constant <value = int64[1] {1}> ()
            n = Mul (p, one)
            r = Reshape (x, n)
            y = Mul (r, half)
        }"""), np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32))
    assert audit(tmp_path, path, data) == []
    printed = _printed(tmp_path, path, data)
    assert printed[0].endswith("again.onnx: 2 node(s) FP16, 0 FP32, 2 Cast(s) added, 1 initializer(s) "
                               "converted, 0 kept in both precisions")
    assert "FP16: 2/2 nodes (100.0%), 100.0% of estimated FLOPs" in printed
    all_fp16 = _printed(tmp_path, path, data, "--mode", "all-fp16")  # measures nothing, counts the same
    assert ": 2 node(s) FP16, 0 FP32, " in all_fp16[0]
    report = _report(tmp_path)
    assert {n: v["flops"] for n, v in report["nodes"].items()} == {
        "node_of_s": 0.0, "node_of_p": 0.0, "node_of_one": 0.0, "node_of_n": 0.0, "node_of_r": 128.0,
        "node_of_y": 128.0}
    assert (report["fp16_share"]["fp16_nodes"], report["fp16_share"]["total_nodes"]) == (2, 2)
    with open(tmp_path / "o.plan.json", encoding="utf-8") as f:  # the plan file keeps its format: all nodes
        assert list(json.load(f)["nodes"]) == ["node_of_s", "node_of_p", "node_of_one", "node_of_n",
                                               "node_of_r", "node_of_y"]


def test_an_integer_index_computation_is_not_counted(tmp_path):
    # Shape, Gather, Range, Mul, Less, NonZero, Squeeze build the columns to keep in int64 and bool;
    # of the float compute (the Gather of x: 32, the Relu kept FP32: 16, the MatMul: 512 FLOPs) 97.1% is
    # FP16 and 2 of 3 nodes; all nodes counted, it was 8/10 nodes
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4,8] x) => (float[4,4] y, float[4,8] z)
        <int64 one = {1}, int64 zero = {0}, int64 two = {2}, int64[1] axes = {0},
         float[8,8] w = {1,0,0,0,0,0,0,0, 0,1,0,0,0,0,0,0, 0,0,1,0,0,0,0,0, 0,0,0,1,0,0,0,0,
                         0,0,0,0,1,0,0,0, 0,0,0,0,0,1,0,0, 0,0,0,0,0,0,1,0, 0,0,0,0,0,0,0,1}> {
            s = Shape (x)
            d = Gather <axis = 0> (s, one)
            r = Range (zero, d, one)
            m = Mul (r, two)
            k = Less (m, d)
            nz = NonZero (k)
            idx = Squeeze (nz, axes)
            cols = Gather <axis = 1> (x, idx)
            y = Relu (cols)
            z = MatMul (x, w)
        }""")
    path, data = _saved(tmp_path, model, np.random.default_rng(0).uniform(-1, 1, (4, 8)).astype(np.float32))
    assert audit(tmp_path, path, data, "--keep-fp32", "node_of_y") == []
    printed = _printed(tmp_path, path, data, "--keep-fp32", "node_of_y")
    assert ": 2 node(s) FP16, 1 FP32, " in printed[0]
    assert "FP16: 2/3 nodes (66.7%), 97.1% of estimated FLOPs" in printed
    report = _report(tmp_path)
    flops = {n: v["flops"] for n, v in report["nodes"].items()}
    assert {n for n, f in flops.items() if f} == {"node_of_cols", "node_of_y", "node_of_z"}
    assert report["fp16_share"]["flops_by_precision"] == pytest.approx({"fp16": 544 / 560, "fp32": 16 / 560})


def test_a_node_that_reads_a_graph_input_as_written_counts_fp32_in_the_node_counts(tmp_path):
    # ArgMax takes the FP32 graph input as written (no Cast in front): planned FP16, it computes FP32.
    # The shares counted it so (6b4a89a) but the counts said "3 node(s) FP16, 0 FP32" and "3/3 nodes"
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32),
                                     "w")
    path, data = _saved(tmp_path, parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4,64] x, float[64,8] w) => (float[4,8] z, int64[4,1] idx) {
            idx = ArgMax <axis = 1> (x)
            h = MatMul (x, w)
            z = Relu (h)
        }"""), np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32))
    model = onnx.load(path)
    model.graph.initializer.append(w)
    del model.graph.input[1]
    onnx.save(model, path)
    # every count and share holds, and the plan JSON states the ArgMax FP32, as it is written (it said
    # FP16, its decision, which the written file cannot honour on an FP32 input)
    assert audit(tmp_path, path, data) == []
    lines = _printed(tmp_path, path, data)
    assert lines[0].endswith(": 2 node(s) FP16, 1 FP32, 2 Cast(s) added, 1 initializer(s) converted, "
                             "0 kept in both precisions")
    assert lines[3] == "FP16: 2/3 nodes (66.7%), 94.2% of estimated FLOPs"
    report = _report(tmp_path)["fp16_share"]
    assert (report["16bit_nodes"], report["fp16_nodes"], report["total_nodes"]) == (2, 2, 3)
