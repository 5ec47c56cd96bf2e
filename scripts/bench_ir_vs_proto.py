"""Raw protobuf vs onnx-ir: load + one full use-def pass over a graph of 50k small nodes.

The developers' guide says onnx-ir makes use-def rewriting simple and loads external data
lazily, at about 3x the cost of raw protobuf on graphs of 50k small nodes. This script measures
it, so the choice (we use raw protobuf) rests on figures from this machine:

    python scripts/bench_ir_vs_proto.py [--nodes 50000] [--repeat 3]

Two models are built in a temp dir: the same chain of ``nodes`` small nodes (Add with a small
initializer, Relu, Mul, ...) once with inline initializers and once with every initializer in
an external data file. For each library and model, a fresh child process loads the model and
then makes one pass that a rewriter needs: for every node its op type, attributes, inputs and
outputs, the producer of each input and the consumers of each output. Printed: best-of-``repeat``
times of load, pass and save, and the child's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHILD_PROTO = """
import onnx
from collections import defaultdict

def load():
    return onnx.load(path, load_external_data=False)

def walk(model):
    producer, consumers = {}, defaultdict(list)
    for node in model.graph.node:
        for name in node.output:
            producer[name] = node
        for name in node.input:
            consumers[name].append(node)
    seen = 0
    for node in model.graph.node:
        seen += len(node.op_type) + len(node.attribute)
        for name in node.input:
            seen += producer.get(name) is not None
        for name in node.output:
            seen += len(consumers[name])
    return seen

def save(model, out):
    with open(out, "wb") as f:
        f.write(model.SerializeToString(deterministic=True))
"""

CHILD_IR = """
import onnx_ir as ir

def load():
    return ir.load(path)

def walk(model):
    seen = 0
    for node in model.graph:
        seen += len(node.op_type) + len(node.attributes)
        for value in node.inputs:
            seen += value is not None and value.producer() is not None
        for value in node.outputs:
            seen += len(value.uses())
    return seen

def save(model, out):
    ir.save(model, out)
"""

CHILD_MAIN = """
import json, resource, time
best = {"load": float("inf"), "pass": float("inf"), "save": float("inf")}
for _ in range(repeat):
    t0 = time.perf_counter(); model = load(); t1 = time.perf_counter()
    seen = walk(model); t2 = time.perf_counter()
    save(model, out); t3 = time.perf_counter()
    best = {"load": min(best["load"], t1 - t0), "pass": min(best["pass"], t2 - t1),
            "save": min(best["save"], t3 - t2)}
    del model
best["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
best["seen"] = seen
print(json.dumps(best))
"""


def build_model(nodes: int) -> onnx.ModelProto:
    """A chain of small nodes; every Add/Mul has its own 16-float initializer."""
    ops = ("Add", "Relu", "Mul", "Sigmoid")
    graph_nodes, inits = [], []
    current = "x"
    rng = np.random.default_rng(0)
    for i in range(nodes):
        op = ops[i % len(ops)]
        out = "y" if i == nodes - 1 else f"t{i}"
        inputs = [current]
        if op in ("Add", "Mul"):
            inits.append(numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), f"c{i}"))
            inputs.append(f"c{i}")
        graph_nodes.append(helper.make_node(op, inputs, [out], name=f"n{i}"))
        current = out
    graph = helper.make_graph(graph_nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run_child(library: str, path: str, out: str, repeat: int) -> dict:
    code = textwrap.dedent(CHILD_PROTO if library == "protobuf" else CHILD_IR)
    script = f"path, out, repeat = {path!r}, {out!r}, {repeat}\n{code}\n{textwrap.dedent(CHILD_MAIN)}"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{library} on {path} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.nodes)
        inline = os.path.join(tmp, "inline.onnx")
        onnx.save(model, inline)
        external = os.path.join(tmp, "external.onnx")
        onnx.save(model, external, save_as_external_data=True, location="external.onnx.data",
                  size_threshold=0)
        print(f"{args.nodes} nodes, {len(model.graph.initializer)} initializers; "
              f"inline model {os.path.getsize(inline) / 2**20:.1f} MiB, external model "
              f"{os.path.getsize(external) / 2**20:.1f} MiB + data; best of {args.repeat}")
        print(f"{'model':<10} {'library':<9} {'load s':>8} {'pass s':>8} {'load+pass':>10} {'ratio':>6} "
              f"{'save s':>8} {'peak MiB':>9}")
        for label, path in (("inline", inline), ("external", external)):
            rows = {lib: run_child(lib, path, os.path.join(tmp, f"out_{lib}.onnx"), args.repeat)
                    for lib in ("protobuf", "onnx-ir")}
            assert rows["protobuf"]["seen"] == rows["onnx-ir"]["seen"], "the two passes did different work"
            base = rows["protobuf"]["load"] + rows["protobuf"]["pass"]
            for lib, r in rows.items():
                total = r["load"] + r["pass"]
                print(f"{label:<10} {lib:<9} {r['load']:>8.3f} {r['pass']:>8.3f} {total:>10.3f} "
                      f"{total / base:>5.1f}x {r['save']:>8.3f} {r['peak_mib']:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
