"""Issue 18's benchmark: does "passed" hold where the model is deployed?

    python scripts/bench_deployed.py                       # every example, the stack, the transformer
    python scripts/bench_deployed.py --models lnstack --blocks 2400
    python scripts/bench_deployed.py --package /path/to/an/older/checkout   # the same, before

For each model it runs ``onnx-precision convert`` (auto, default options, in this process) and prints
the exit status and status, the FP16 share of FLOPs, whether the written model loads in onnxruntime
at its default session options (in a child process, as a user loads it) and the convert time. Models:

- every example of ``models/`` with its sample data;
- ``lnstack``: ``--blocks`` decomposed LayerNorms in a row (ReduceMean, Sub, Pow, ReduceMean, Add,
  Sqrt, Div, Mul, Add, as TorchScript exports LayerNorm below opset 17; weight 1, bias 0, as torch
  initialises them), at opset 17, the first fed by the FP32 graph input;
- ``transformer14``: a 2-layer pre-LN transformer encoder at opset 14 (what torch exports there:
  decomposed LayerNorms, attention as MatMul/Div/Softmax/MatMul, a GELU written with Erf), built here
  with onnx.helper from seeded random weights.

Then ``--validation-inputs``: a model whose plan, found on one sample, fails a held-out one, and the
line the run prints.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lnstack(blocks: int) -> onnx.ModelProto:
    from models.stacks import layer_norm_stack

    return layer_norm_stack(blocks, rows=4, tail="")


def transformer14(layers: int = 2, hidden: int = 64, seq: int = 16, heads: int = 4) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits = [nh.from_array(np.array(2, np.float32), "two"), nh.from_array(np.array(1e-5, np.float32), "eps"),
             nh.from_array(np.array(np.sqrt(hidden // heads), np.float32), "scale"),
             nh.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
             nh.from_array(np.array(1, np.float32), "one"),
             nh.from_array(np.array(0.5, np.float32), "half"),
             nh.from_array(np.array([seq, heads, hidden // heads], np.int64), "split_heads"),
             nh.from_array(np.array([seq, hidden], np.int64), "merge_heads")]

    def weight(name: str, *shape: int, std: float = 0.08) -> str:
        inits.append(nh.from_array((rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def op(kind: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(h.make_node(kind, inputs, [name], name=name, **attrs))
        return name

    def layer_norm(x: str, p: str) -> str:
        mean = op("ReduceMean", [x], p + "mean", axes=[-1])
        d = op("Sub", [x, mean], p + "sub")
        var = op("ReduceMean", [op("Pow", [d, "two"], p + "pow")], p + "var", axes=[-1])
        norm = op("Div", [d, op("Sqrt", [op("Add", [var, "eps"], p + "add_eps")], p + "sqrt")], p + "div")
        inits.append(nh.from_array(np.ones(hidden, np.float32), p + "g"))
        inits.append(nh.from_array(np.zeros(hidden, np.float32), p + "b"))
        return op("Add", [op("Mul", [norm, p + "g"], p + "scale"), p + "b"], p + "shift")

    x = "x"
    for k in range(layers):
        p = f"l{k}_"
        a = layer_norm(x, p + "ln1_")
        q, kk, v = (op("Reshape", [op("MatMul", [a, weight(p + w, hidden, hidden)], p + w + "_mm"),
                                   "split_heads"], p + w + "_heads")
                    for w in ("q", "k", "v"))
        qt = op("Transpose", [q], p + "qt", perm=[1, 0, 2])
        kt = op("Transpose", [kk], p + "kt", perm=[1, 2, 0])
        vt = op("Transpose", [v], p + "vt", perm=[1, 0, 2])
        scores = op("Div", [op("MatMul", [qt, kt], p + "qk"), "scale"], p + "scores")
        ctx = op("MatMul", [op("Softmax", [scores], p + "softmax", axis=-1), vt], p + "ctx")
        merged = op("Reshape", [op("Transpose", [ctx], p + "ctx_t", perm=[1, 0, 2]), "merge_heads"],
                    p + "merged")
        x = op("Add", [x, op("MatMul", [merged, weight(p + "o", hidden, hidden)], p + "o_mm")], p + "res1")
        b = layer_norm(x, p + "ln2_")
        up = op("MatMul", [b, weight(p + "up", hidden, 4 * hidden)], p + "up_mm")
        erf = op("Erf", [op("Div", [up, "sqrt2"], p + "gelu_div")], p + "erf")
        gelu = op("Mul", [op("Mul", [up, op("Add", [erf, "one"], p + "gelu_add")], p + "gelu_mul"), "half"],
                  p + "gelu")
        x = op("Add", [x, op("MatMul", [gelu, weight(p + "down", 4 * hidden, hidden)], p + "down_mm")],
               p + "res2")
    x = layer_norm(x, "final_ln_")
    graph = h.make_graph(nodes, "transformer14",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [seq, hidden])],
                         [h.make_tensor_value_info(x, TensorProto.FLOAT, [seq, hidden])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def default_load(path: str) -> str:
    child = ("import sys, onnxruntime as ort\n"
             "try:\n    ort.InferenceSession(sys.argv[1])\nexcept Exception as e:\n"
             "    print(str(e).splitlines()[0][:150]); sys.exit(3)")
    done = subprocess.run([sys.executable, "-c", child, path], capture_output=True, text=True, check=False)
    return "loads" if done.returncode == 0 else f"FAILS: {done.stdout.strip() or done.returncode}"


def run(main, name: str, model: str, data: str, out_dir: str, extra: tuple[str, ...] = ()) -> dict:
    out = os.path.join(out_dir, f"{name}.fp16.onnx")
    captured = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(io.StringIO()):
        code = main(["convert", model, "-o", out, "--inputs", data, "-q", *extra])
    seconds = time.perf_counter() - started
    report_path = out[:-5] + ".report.json"
    report = json.load(open(report_path)) if os.path.exists(report_path) else {}
    share = (report.get("fp16_share") or {}).get("flops")
    return {"model": name, "exit": code, "status": report.get("status", "-"),
            "fp16_flops": "-" if share is None else f"{100 * share:.1f}%",
            "default_load": default_load(out) if os.path.exists(out) else "not written",
            "seconds": f"{seconds:.1f}", "line": captured.getvalue().strip()}


def validation_example(main, out_dir: str) -> str:
    """x*x/1000: the search's sample keeps |x| <= 100; a held-out one reaches 300 and overflows."""
    graph = h.make_graph([h.make_node("Mul", ["x", "x"], ["sq"], name="square"),
                          h.make_node("Div", ["sq", "k"], ["y"], name="scale")], "g",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
                         [nh.from_array(np.array(1000, np.float32), "k")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(out_dir, "square.onnx")
    onnx.save(model, path)
    np.savez(os.path.join(out_dir, "search.npz"), x=np.linspace(-100, 100, 8, dtype=np.float32))
    held_out = os.path.join(out_dir, "held_out")
    os.makedirs(held_out, exist_ok=True)
    np.savez(os.path.join(held_out, "a.npz"), x=np.linspace(-50, 50, 8, dtype=np.float32))
    np.savez(os.path.join(held_out, "b.npz"), x=np.linspace(-300, 300, 8, dtype=np.float32))
    row = run(main, "square", path, os.path.join(out_dir, "search.npz"), out_dir,
              ("--headroom", "0", "--validation-inputs", held_out))
    return f"exit {row['exit']}: {row['line']}"


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="examples,lnstack,transformer14")
    parser.add_argument("--blocks", type=int, default=2400, help="LayerNorms in the stack")
    parser.add_argument("--package", default=ROOT, help="the checkout whose onnx_precision runs")
    args = parser.parse_args()
    sys.path.insert(0, args.package)
    sys.path.insert(1, ROOT)
    import models
    from models import generate
    from onnx_precision.cli import main

    wanted = args.models.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        if "examples" in wanted:
            for name in sorted(models.BUILDERS):
                rows.append(run(main, name, generate.model_path(name), generate.data_path(name), out_dir))
        rng = np.random.default_rng(0)
        for name, build, shape in (("lnstack", lambda: lnstack(args.blocks), (4, 64)),
                                   ("transformer14", transformer14, (16, 64))):
            if name in wanted:
                path, data = os.path.join(out_dir, name + ".onnx"), os.path.join(out_dir, name + ".npz")
                onnx.save(build(), path)
                np.savez(data, x=rng.standard_normal(shape).astype(np.float32))
                rows.append(run(main, name, path, data, out_dir))
        print(f"onnx_precision from {args.package}")
        print(f"{'model':16} {'exit':>4} {'status':16} {'FP16 FLOPs':>10} {'seconds':>8}  default load")
        for r in rows:
            print(f"{r['model']:16} {r['exit']:>4} {r['status']:16} {r['fp16_flops']:>10} {r['seconds']:>8}  "
                  f"{r['default_load']}")
        print("\n--validation-inputs, a held-out sample failing the plan found on another:")
        print(validation_example(main, out_dir))


if __name__ == "__main__":
    main_()
