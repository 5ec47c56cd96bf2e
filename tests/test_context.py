"""The model context: derived facts computed once, weights read once, external data found from any cwd."""

from __future__ import annotations

import collections
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision import policy, rules
from onnx_precision.cli import main
from onnx_precision.context import ModelContext, load_model
from onnx_precision.policy import resolution as resolve_module
from onnx_precision.storage import external_data


def _external_mlp(directory: str, layers: int = 3) -> str:
    """A MatMul chain whose weights and a Constant bias all live in ``m.data``; returns the model path."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits.append(
            onnx.numpy_helper.from_array((rng.standard_normal((32, 32)) / 8).astype(np.float32), f"w{i}")
        )
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        x = f"h{i}"
    bias = onnx.numpy_helper.from_array(np.full((32,), 0.5, np.float32), "bias_value")
    nodes.append(helper.make_node("Constant", [], ["bias"], name="bias_const", value=bias))
    nodes.append(helper.make_node("Add", [x, "bias"], ["y"], name="add_bias"))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "m.onnx")
    onnx.save(model, path, save_as_external_data=True, location="m.data", size_threshold=0)
    _externalize_constant(path, "m.data")
    np.savez(os.path.join(directory, "x.npz"), x=rng.standard_normal((2, 32)).astype(np.float32))
    return path


def _externalize_constant(path: str, location: str) -> None:
    """Move the Constant node's value into the data file too (onnx.save leaves attributes inline);
    exporters of large models write them so, and issue 12 crashed reading one."""
    model = onnx.load(path, load_external_data=False)
    tensor = next(n for n in model.graph.node if n.op_type == "Constant").attribute[0].t
    with open(os.path.join(os.path.dirname(path), location), "ab") as f:
        offset = f.tell()
        f.write(tensor.raw_data)
    for key, value in (
        ("location", location),
        ("offset", str(offset)),
        ("length", str(len(tensor.raw_data))),
    ):
        tensor.external_data.add(key=key, value=value)
    tensor.data_location = TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def test_each_external_weight_is_read_once_per_run_plus_the_copy_into_the_output(tmp_path, monkeypatch):
    """Before the context (issue 11) each weight was read 5 times in one auto conversion: 4 range
    scans (plan resolution three times, the risk rules once) and the copy into the output. Now: one
    range scan, cached in the context, and the copy."""
    path = _external_mlp(str(tmp_path / "src"))
    reads: collections.Counter = collections.Counter()
    original = external_data.iter_stored_chunks

    def counting(ref, buffer=None):
        reads[(os.path.basename(ref.file), ref.tensor_name)] += 1
        return original(ref, buffer)

    monkeypatch.setattr(external_data, "iter_stored_chunks", counting)
    out = str(tmp_path / "out.onnx")
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "src" / "x.npz"), "-q"]) == 0
    source = {name: n for (f, name), n in reads.items() if f == "m.data"}
    # the Constant's value: one range scan (as 'bias_value') and one streamed copy of its FP16 cast
    # (the Constant attribute is named 'value')
    assert source == {"w0": 2, "w1": 2, "w2": 2, "bias_value": 1, "value": 1}


def test_resolution_reads_no_weight_once_the_context_knows_the_blockers(tmp_path, monkeypatch):
    ctx = load_model(_external_mlp(str(tmp_path)))
    first = policy.resolve(ctx, ctx.all_low_plan())
    assert first.resolved and policy.resolve(ctx, first) is first  # a resolved plan comes back as is
    monkeypatch.setattr(
        external_data, "iter_stored_chunks", lambda *a: pytest.fail("a weight was read again")
    )
    again = policy.resolve(ctx, ctx.all_low_plan().with_fp32(["mm1"]))
    assert again.resolved and again.fp32_nodes == ("mm1",)
    assert not again.with_fp32(["mm0"]).resolved  # any change makes it a new, unresolved plan


def test_blockers_are_computed_once_per_context(tmp_path, monkeypatch):
    ctx = load_model(_external_mlp(str(tmp_path)))
    calls = []
    original = resolve_module.node_blockers
    monkeypatch.setattr(resolve_module, "node_blockers",
                        lambda c, low=None: calls.append(c) or original(c, low))
    for _ in range(3):
        policy.resolve(ctx, ctx.all_low_plan())
    assert policy.forced_fp32(ctx) == frozenset()
    assert len(calls) == 1


def test_external_data_is_read_relative_to_the_model_not_the_working_directory(tmp_path, monkeypatch):
    """convert, check and analyze on a model with external weights and an external Constant value,
    run from an unrelated directory: every read resolves against the model's own directory."""
    path = _external_mlp(str(tmp_path / "models"))
    raw = onnx.load(path, load_external_data=False)
    constant = next(n for n in raw.graph.node if n.op_type == "Constant")
    assert constant.attribute[0].t.data_location == TensorProto.EXTERNAL  # the case issue 12 reported
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(elsewhere)
    data = str(tmp_path / "models" / "x.npz")
    out = str(tmp_path / "out" / "m16.onnx")
    assert main(["convert", path, "-o", out, "--inputs", data, "--external-data", "-q"]) == 0
    assert main(["check", path, out, "--inputs", data, "-q"]) == 0
    assert main(["analyze", path, "--inputs", data, "-q"]) == 0
    assert os.listdir(elsewhere) == []


def test_analyze_verbose_lists_why_rules_found_nothing(tmp_path, capsys):
    path = _external_mlp(str(tmp_path))
    assert main(["analyze", path, "--inputs", str(tmp_path / "x.npz"), "-v"]) == 0
    out = capsys.readouterr().out
    assert "rules that looked and found nothing:" in out
    assert "mm0: contraction: inner products of depth 32, no output past 65504" in out


def test_rules_skip_custom_domains_and_a_subset_of_rules_can_run():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph(
        [
            helper.make_node("Exp", ["x"], ["e"], name="exp"),
            helper.make_node("MyOp", ["e"], ["y"], name="plugin", domain="my.domain"),
        ],
        "g",
        [x],
        [y],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)]
    )
    facts = rules.ModelFacts(ModelContext.of(model))
    run = rules.run_rules(facts)
    assert [f.rule for f in run.findings] == ["exp-overflow"]
    assert [(s.node, s.reason) for s in run.skipped if s.node == "plugin"] == [
        ("plugin", "op of domain 'my.domain': the rules know only ONNX ops")
    ]
    only_softmax = rules.run_rules(facts, [r for r in rules.RULES if r.name == "softmax"])
    assert only_softmax.findings == ()
