"""Runs in bounded memory: a default load that needs more memory than the run has is said to, with the
figures, never called a crash of onnxruntime with a workaround for remedy (issue 34).

The kernel's kill is played two ways: simulated (a child that SIGKILLs itself while the OOM counts are
made to go up), and real, under a cgroup v1 memory limit of a few tens of MB on a model whose load needs
more, where this machine lets a test make a memory cgroup (skipped elsewhere).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from onnx_precision import memory
from onnx_precision.errors import UsageError
from onnx_precision.options import Judging, memory_size
from onnx_precision.oracle import default_load, forkserver
from onnx_precision.oracle.default_load import DEFAULT, LoadFailure, default_load_problem

KILLED_CHILD = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


def _matmul(tmp_path, width: int, dtype: int = TensorProto.FLOAT) -> str:
    """x [1, width] @ w [width, width], w inline (its load copies it out of the proto)."""
    w = np.full((width, width), 0.5, onnx.helper.tensor_dtype_to_np_dtype(dtype))
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
                         [h.make_tensor_value_info("x", dtype, [1, width])],
                         [h.make_tensor_value_info("y", dtype, [1, width])], [nh.from_array(w, "w")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / f"mm{width}.onnx")
    onnx.save(model, path)
    return path


def _killed(monkeypatch, oom: memory.OomKill | None) -> None:
    monkeypatch.setattr(default_load, "_child_command",
                        lambda path, attempt, libraries: [sys.executable, "-c", KILLED_CHILD])
    monkeypatch.setattr(memory.OomWatch, "killed", lambda self, peak=0: oom)


def test_a_child_killed_for_memory_is_said_to_be_with_the_limit_and_no_workaround(tmp_path, monkeypatch):
    path = _matmul(tmp_path, 16)
    group = memory.Cgroup("/sys/fs/cgroup/memory/limited", 1)
    _killed(monkeypatch, memory.OomKill(group, 3_000_000_000, 2_950_000_000))
    size = memory.gigabytes(os.path.getsize(path))
    said = default_load_problem(path)
    assert said == ("the load at onnxruntime's default session options was not checked: the kernel "
                    "killed it for memory at the 3.00 GB memory limit of its cgroup (/sys/fs/cgroup/memory/"
                    "limited), "
                    f"after it had reached 2.95 GB; the model is {size}, and at its default options "
                    "onnxruntime's CPU provider holds an FP32 copy of each FP16 MatMul weight; load it where "
                    "more memory is free to check it")
    failure = LoadFailure.of(said)
    assert failure.for_memory and failure.loads_with is None and failure.sentence == said
    assert "SIGKILL" not in said and "ORT_ENABLE_BASIC" not in said


def test_the_machine_s_oom_killer_is_named_as_such(tmp_path, monkeypatch):
    _killed(monkeypatch, memory.OomKill(None, 24_000_000_000))
    said = default_load_problem(_matmul(tmp_path, 16))
    assert "the kernel killed it for memory at the machine's 24.0 GB of memory;" in said


def test_a_sigkill_that_is_not_the_oom_killer_stays_a_crash(tmp_path, monkeypatch):
    _killed(monkeypatch, None)
    said = default_load_problem(_matmul(tmp_path, 16))
    assert said.startswith("with default session options onnxruntime crashes (SIGKILL) loading it")
    assert not LoadFailure.of(said).for_memory


def test_a_load_past_the_budget_is_stopped_and_said_with_its_figures(tmp_path):
    path = _matmul(tmp_path, 2048)  # 16.8 MB of weights, inline: onnxruntime copies them out of the proto
    said = default_load._try(path, DEFAULT, (), budget=1)
    assert said.startswith("the load at onnxruntime's default session options was not checked: it had "
                           "taken ")
    assert ", past the 0.00 GB of memory the run could give it, and was stopped; the model is 0.02 GB" \
        in said
    assert default_load._try(path, DEFAULT, (), budget=0) == ""  # no budget: it loads


def _cgroup_v1_parent() -> str | None:
    """This process's memory cgroup (v1), where a test may make one beneath; None where it cannot."""
    own = next((g for g in memory.cgroups() if g.version == 1), None)
    if own is None or not os.access(own.path, os.W_OK):
        return None
    return own.path


@pytest.mark.slow  # 3.5 s: a fork server of its own (onnxruntime imported), the load killed
@pytest.mark.skipif(_cgroup_v1_parent() is None, reason="no writable cgroup v1 memory controller here")
def test_a_child_the_kernel_kills_at_a_cgroup_limit_is_reported_as_memory(tmp_path, monkeypatch):
    path = _matmul(tmp_path, 4096)  # 67 MB of weights inline: the load holds them twice
    folder = os.path.join(str(_cgroup_v1_parent()), f"onnx-precision-test-{os.getpid()}")
    os.mkdir(folder)
    server = forkserver.Server()
    try:
        with open(os.path.join(folder, "memory.limit_in_bytes"), "w") as f:
            f.write(str(48 << 20))
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(server.process.pid))  # its children, the loads, are forked into the cgroup
        monkeypatch.setattr(forkserver, "_SERVER", server)
        said = default_load_problem(path)
    finally:
        server.close()
        for _ in range(50):  # the cgroup is removable once the server has gone
            try:
                os.rmdir(folder)
                break
            except OSError:
                time.sleep(0.02)
    assert said.startswith("the load at onnxruntime's default session options was not checked: the kernel "
                           f"killed it for memory at the 0.05 GB memory limit of its cgroup ({folder}), "
                           "after it had reached ")


def test_a_memory_size_is_read_as_the_figures_are_printed():
    assert [memory_size(t) for t in ("8G", "8GB", "512M", "3.5GiB", "2MiB", "4000000000")] == \
        [8_000_000_000, 8_000_000_000, 512_000_000, 3_758_096_384, 2_097_152, 4_000_000_000]
    for bad in ("x", "G", "", "8Q"):
        with pytest.raises(ValueError):
            memory_size(bad)


@pytest.mark.parametrize("given", [0, 999_999, -(10**9), 1.5e9, True])
def test_a_budget_below_a_megabyte_or_not_a_size_is_refused_naming_the_flag(given):
    with pytest.raises(UsageError, match=r"^--memory-budget .*: expected a memory size of at least 1M"):
        Judging(memory_budget=given)


def test_the_cgroups_of_this_process_are_read_from_its_own_to_the_root():
    groups = memory.cgroups()
    if not groups:
        pytest.skip("no memory cgroup mounted here")
    assert all(os.path.isdir(g.path) for g in groups)
    assert [len(g.path) for g in groups if g.version == 1] == sorted(
        (len(g.path) for g in groups if g.version == 1), reverse=True)  # its own first, then each parent
    limit, group = memory.limit_bytes()
    assert limit > 0 and (group is None or group.limit == limit)


def test_a_watch_holds_the_peak_of_anonymous_memory_and_of_the_children_it_was_told():
    with memory.Watch(budget=10**9) as watch:
        block = np.ones(64 << 20, np.uint8)  # 67 MB touched, then freed
        time.sleep(3 * memory.SAMPLE_S)
        held = memory.anonymous_bytes()
        del block
        memory.note_child(2_000_000_000)
        figures = watch.figures(4_750_000_000)
    memory.note_child(9_000_000_000)  # after the run: not its child
    assert watch.children == 2_000_000_000
    assert figures.held >= held > 64 << 20 and figures.children == 2_000_000_000
    assert figures.budget == 10**9 and figures.model == 4_750_000_000 and not figures.over
    assert figures.text == (f"budget 1.00 GB, held at most {memory.gigabytes(figures.held)} (resident "
                            f"{memory.gigabytes(figures.resident)}, the mapped weights' pages included); a "
                            "default-load child reached 2.00 GB; the model 4.75 GB")


def test_a_conversion_whose_default_load_is_killed_for_memory_passes_with_a_warning(tmp_path, capsys,
                                                                                   monkeypatch):
    from onnx_precision.cli import main

    path = _matmul(tmp_path, 16)
    _killed(monkeypatch, memory.OomKill(memory.Cgroup("/sys/fs/cgroup/memory/limited", 1), 3_000_000_000))
    out = tmp_path / "o.onnx"
    assert main(["convert", path, "-o", str(out), "--memory-budget", "2G"]) == 0
    said = capsys.readouterr()
    assert f"{path} -> {out}: passed" in said.out
    assert ("onnx-precision: warning: the load at onnxruntime's default session options was not checked: "
            "the kernel killed it for memory at the 3.00 GB memory limit of its cgroup") in said.err
    note = next(line for line in said.out.splitlines() if line.startswith("note: memory: "))
    assert note.startswith("note: memory: budget 2.00 GB, held at most ")
    assert note.endswith(f"; the model {memory.gigabytes(os.path.getsize(path))}")
    assert "ORT_ENABLE_BASIC" not in said.out + said.err and "SIGKILL" not in said.out + said.err


def _stack(tmp_path, layers: int) -> str:
    """``layers`` MatMuls of 2048x2048 FP32 weights (16.8 MB each) in an external data file."""
    rng = np.random.default_rng(0)
    weights = [nh.from_array(rng.standard_normal((2048, 2048), dtype=np.float32) / 45, f"w{i}")
               for i in range(layers)]
    nodes = [h.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"], name=f"mm{i}")
             for i in range(layers)]
    graph = h.make_graph(nodes, "stack", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                         [h.make_tensor_value_info(f"h{layers - 1}", TensorProto.FLOAT, [1, 2048])], weights)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / f"stack{layers}.onnx")
    onnx.save(model, path, save_as_external_data=True, location=f"stack{layers}.onnx.data")
    return path


def _held_over(path: str, out: str) -> float:
    """What a conversion of ``path`` held above what the process held before it, from its memory note."""
    from onnx_precision.cli import main

    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what an earlier run freed, returned: not counted before
    before = memory.anonymous_bytes()
    assert main(["convert", path, "-o", out, "-q", "--memory-budget", "20G"]) == 0  # the figures said
    notes = json.loads(open(out.removesuffix(".onnx") + ".report.json").read())["notes"]
    note = next(n for n in notes if n.startswith("memory: "))
    return float(note.split("held at most ")[1].split(" GB")[0]) * 1e9 - before


@pytest.mark.slow  # 7-15 s: three conversions, 168 MB of weights written, converted and verified
def test_what_a_conversion_holds_does_not_grow_with_its_weights(tmp_path):
    """2 and 8 MatMul layers (34 and 134 MB of weights): the run (reference, search, writing,
    verification) holds no more for the 100 MB more weights than half of them (measured: -20 to +16 MB;
    the weights are mapped by every session and streamed when written, never held)."""
    from onnx_precision.cli import main

    # a first conversion imports what a run imports (onnxruntime among them) before the measure
    assert main(["convert", _matmul(tmp_path, 16), "-o", str(tmp_path / "first.onnx"), "-q"]) == 0
    small, large = _stack(tmp_path, 2), _stack(tmp_path, 8)
    more = os.path.getsize(large + ".data") - os.path.getsize(small + ".data")
    grown = _held_over(large, str(tmp_path / "large.onnx")) - _held_over(small, str(tmp_path / "small.onnx"))
    assert more > 100e6 and grown < more / 2


def test_a_default_load_child_gets_the_run_s_budget_less_what_the_run_holds(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 10_000_000_000)
    monkeypatch.setattr(memory, "anonymous_bytes", lambda pid="self": 1_500_000_000)
    assert default_load.child_budget(8_000_000_000) == 6_500_000_000
    assert default_load.child_budget(None) == 10_000_000_000  # MemAvailable counts this process already
    assert default_load.child_budget(20_000_000_000) == 10_000_000_000  # never more than is available
    assert default_load.child_budget(1_000_000_000) == 1  # the run holds it all: the child stops at once


def test_the_summary_states_the_memory_figures_only_where_memory_was_a_question(tmp_path, capsys):
    from onnx_precision.cli import main

    path, out = _matmul(tmp_path, 16), str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out]) == 0  # a model of a few KB run in gigabytes
    assert not any(line.startswith("note: memory: ") for line in capsys.readouterr().out.splitlines())
    assert main(["convert", path, "-o", out, "--memory-budget", "2G"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert any(line.startswith("note: memory: budget 2.00 GB, ") for line in said)
    small = memory.RunMemory(budget=16 << 30, held=1 << 20, resident=2 << 20, children=0, model=(1 << 30) - 1)
    assert not small.worth_saying(False)
    assert replace(small, model=1 << 30).worth_saying(False)  # 1/16 of the budget
    assert replace(small, held=17 << 30).worth_saying(False)  # over it


def test_where_memory_cannot_be_read_the_summary_says_no_figure(tmp_path, capsys, monkeypatch):
    """macOS and Windows have no /proc: what is available and what a run held read as 0, and a run there
    said "note: memory: budget 0.00 GB, held at most 0.00 GB ..." on every conversion (a budget of 0 is
    exceeded by any model)."""
    from onnx_precision.cli import main

    real = memory._read
    monkeypatch.setattr(memory, "_read", lambda path: None if path.startswith("/proc/") else real(path))
    path, out = _matmul(tmp_path, 16), str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out]) == 0
    assert not any(line.startswith("note: memory") for line in capsys.readouterr().out.splitlines())
    assert main(["convert", path, "-o", out, "--memory-budget", "2G"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: memory")]
    assert said == ["note: memory: budget 2.00 GB, not measured (no /proc here)"]
