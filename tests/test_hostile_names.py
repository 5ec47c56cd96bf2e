"""A name is data (issue 30): every writer that puts a name from the model somewhere (the summary, the
``-q`` verdict, analyze's table, check's lines, stderr, the ``next:`` line, the ``--trt-flags`` file, the
Markdown report, the trade-off picture, the JSON) renders it for that sink (:mod:`onnx_precision.render`).
The model's names hold newlines, CR, ESC/OSC sequences, a C1 CSI (U+009B), a bidi override (U+202E),
quotes, backticks and ``|``; a newline followed by ``touch PWNED`` is what a shell would run."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main
from onnx_precision.render import UNSAFE, for_markdown, for_shell, for_terminal, from_ansi_c, markdown_text
from onnx_precision.tradeoff import PlanPoint
from onnx_precision.tradeoff_picture import Picture, front_svg

# An OSC 8 hyperlink, a switch to the line-drawing set, a C1 CSI that clears the screen, a bidi override,
# a line separator, CR (and, but in the input's name, which --input-shape could not take with a '[', a CSI
# colour).
NASTY = "\x1b]8;;http://evil/\x07\x1b(0\u009b2J\u202e\u2028\r"
CSI = "\x1b[31m"
HOSTILE = {  # role -> (hostile name, ordinary name)
    "input": (f"in\ntouch PWNED_IN #{NASTY}", "in"),
    "scale": (f"scale\ntouch PWNED_SCALE #{NASTY}{CSI}", "scale"),
    "ln": (f"ln\ntouch PWNED_LN #{NASTY}{CSI}", "ln"),  # no layer name in 8.6-10.0: in a comment there
    "act": (f"act\ntouch PWNED_ACT #{NASTY}{CSI}", "act"),  # in --layerPrecisions
    "quote": (f"q'\ntouch PWNED_Q #{NASTY}{CSI}", "q"),  # a quote: trtexec cannot name it, a comment says so
    "output": (f"y`|\ntouch PWNED_OUT #{NASTY}{CSI}", "y"),
}
SHAPE = "2x64"


def _names(hostile: bool) -> dict[str, str]:
    return {role: names[0 if hostile else 1] for role, names in HOSTILE.items()}


def _model(path: str, name: dict[str, str]) -> str:
    """y = Relu(Relu(LayerNorm(input * w))), the input of shape [n, 64] (n symbolic)."""
    nodes = [helper.make_node("Mul", [name["input"], "w"], ["m"], name=name["scale"]),
             helper.make_node("LayerNormalization", ["m", "s", "b"], ["l"], name=name["ln"], axis=-1,
                              epsilon=1e-5),
             helper.make_node("Relu", ["l"], ["r"], name=name["act"]),
             helper.make_node("Relu", ["r"], [name["output"]], name=name["quote"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name["input"], TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info(name["output"], TensorProto.FLOAT, ["n", 64])],
        [numpy_helper.from_array(np.linspace(0.5, 2, 64, dtype=np.float32), "w"),
         numpy_helper.from_array(np.ones(64, np.float32), "s"),
         numpy_helper.from_array(np.zeros(64, np.float32), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _convert_args(model: str, out: str, flags: str, name: dict[str, str]) -> list[str]:
    return ["convert", model, "-o", out, "--target", "tensorrt", "--trt-flags", flags, "--fp16-io",
            "--keep-fp32-op", "LayerNormalization", "--keep-fp32-op", "Relu",
            "--input-shape", f"{name['input']}:{SHAPE}", "--max-rel-rms", f"{name['output']}:0.1"]


class Run:
    def __init__(self, folder, capsys, hostile: bool) -> None:
        self.folder = folder
        self.names = _names(hostile)
        self.model = _model(str(folder / "m.onnx"), self.names)
        self.out, self.flags = str(folder / "o.onnx"), str(folder / "o.flags")
        self.code = main(_convert_args(self.model, self.out, self.flags, self.names))
        captured = capsys.readouterr()
        self.stdout, self.stderr = captured.out, captured.err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    capsys = _Capture()
    with capsys:
        hostile = Run(tmp_path_factory.mktemp("hostile"), capsys, True)
        ordinary = Run(tmp_path_factory.mktemp("ordinary"), capsys, False)
    return hostile, ordinary


class _Capture:
    """capsys for a module-scoped fixture: stdout and stderr redirected to strings."""

    def __enter__(self):
        import contextlib
        import io
        self._out, self._err = io.StringIO(), io.StringIO()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self._out))
        self._stack.enter_context(contextlib.redirect_stderr(self._err))
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def readouterr(self):
        class Captured:
            out, err = self._out.getvalue(), self._err.getvalue()
        self._out.seek(0), self._out.truncate(), self._err.seek(0), self._err.truncate()
        return Captured


def _terminal_safe(text: str) -> list[str]:
    """``text``'s lines, each checked to hold no raw control, C1, bidi or separator character."""
    lines = text.splitlines()
    for line in lines:
        assert not UNSAFE.search(line), repr(line)
        assert not line.startswith("touch "), repr(line)
    return lines


# --- the renderers ---------------------------------------------------------------------------------


def test_each_unsafe_character_is_a_visible_escape_and_ordinary_text_is_kept():
    assert for_terminal("a\nb\rc\td\x1b[31m\x7f\u009b\u202e\u2066\u200f\u2028é/x.y:z_-") == (
        "a\\nb\\rc\\td\\x1b[31m\\x7f\\x9b\\u202e\\u2066\\u200f\\u2028é/x.y:z_-")
    assert for_shell("model/x.y:z_-") == "model/x.y:z_-" and for_shell("a b") == "'a b'"
    assert for_shell("x\ntouch P #'\\\u202e") == "$'x\\ntouch P #\\'\\\\\\xe2\\x80\\xae'"


@pytest.mark.parametrize("word", ["x\ntouch PWNED #", "a'b\\c", NASTY + CSI, "é ü", "$(touch PWNED)",
                                  "`touch PWNED`"])
def test_a_shell_word_reaches_the_command_whole(tmp_path, word):
    out = subprocess.run(["bash", "-c", f"printf %s {for_shell(word)}"], cwd=tmp_path, capture_output=True,
                         env={"PATH": os.environ["PATH"], "LC_ALL": "C"}, check=True).stdout
    assert out.decode("utf-8") == word and os.listdir(tmp_path) == []
    quoted = for_shell(word)
    assert "\n" not in quoted and (not quoted.startswith("$'") or from_ansi_c(quoted[2:-1]) == word)


def test_a_name_is_one_markdown_code_span():
    assert for_markdown("a`b") == "``a`b``" and for_markdown("`x") == "`` `x ``"
    assert for_markdown("a|b\n", cell=True) == "`a\\|b\\n`"


def test_a_sentence_in_markdown_starts_no_markup_and_ours_stay_as_they_are():
    assert markdown_text("node '[x](http://evil/)<img src=x>`a`\\](y)' | z", cell=True) == (
        "node '[x\\](http://evil/)\\<img src=x>\\`a\\`\\\\\\](y)' \\| z")
    ours = "slice at y[0, 3, 0] (32 elements) rel RMS err <= 0.2; layers <name>_<k>"
    assert markdown_text(ours) == ours.replace("<n", "\\<n").replace("<k", "\\<k")


def test_the_picture_is_xml_whatever_its_text():
    svg = front_svg(Picture(points=(PlanPoint(0, ("n",), 0.5, True, {"y": 0.01}),), statistic="rel RMS err",
                            note=f"no search: {HOSTILE['ln'][0]} & <b>"))
    texts = [t.text or "" for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert any("touch PWNED_LN #\\x1b]8;;http://evil/" in t and "& <b>" in t for t in texts)
    assert not UNSAFE.search(svg.replace("\n", ""))


# --- the writers of a conversion --------------------------------------------------------------------


def test_the_summary_prints_as_many_lines_as_with_ordinary_names(runs):
    hostile, ordinary = runs
    assert hostile.code == ordinary.code == 0, hostile.stderr
    lines = _terminal_safe(hostile.stdout)
    assert len(lines) == len(ordinary.stdout.splitlines())
    assert any(for_terminal(HOSTILE["act"][0]) in line for line in lines)
    _terminal_safe(hostile.stderr)


def _sandbox(tmp_path, script: str) -> list[list[str]]:
    """``script`` run by bash in an empty folder with trtexec, polygraphy and onnx-precision stand-ins that
    record their arguments: the calls, each [program, *args]. The folder must stay empty."""
    bin_dir, box = tmp_path / "bin", tmp_path / "box"
    bin_dir.mkdir()
    box.mkdir()
    calls = tmp_path / "calls"
    for tool in ("trtexec", "polygraphy", "onnx-precision"):
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\nprintf "%s\\0" {tool} "$@" END_OF_CALL >> "{calls}"\n')
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (box / "script").write_text(script)
    done = subprocess.run(["bash", "script"], cwd=box, capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(box)})
    assert done.returncode == 0, done.stderr
    assert os.listdir(box) == ["script"], os.listdir(box)  # touch PWNED_* made nothing
    words = calls.read_bytes().decode("utf-8").split("\0")[:-1] if calls.exists() else []
    out: list[list[str]] = []
    call: list[str] = []
    for w in words:
        if w == "END_OF_CALL":
            out.append(call)
            call = []
        else:
            call.append(w)
    return out


def test_the_flags_file_runs_its_commands_and_nothing_else(runs, tmp_path):
    hostile, _ = runs
    text = open(hostile.flags, encoding="utf-8").read()
    lines = _terminal_safe(text)
    calls = _sandbox(tmp_path, text)
    commands = [line for line in lines if line and not line.startswith("#")]
    assert [c[0] for c in calls] == [line.split(" ", 1)[0] for line in commands]  # those, none more
    ln, act, quote, inp, out = (HOSTILE[r][0] for r in ("ln", "act", "quote", "input", "output"))
    shapes = [f"--{w}Shapes={inp}:{SHAPE}" for w in ("min", "opt", "max")]
    assert calls[0] == ["trtexec", f"--onnx={hostile.out}", "--stronglyTyped", *shapes]
    pins = calls[1][calls[1].index("--layer-precisions") + 1:calls[1].index("--tensor-datatypes")]
    assert pins == [f"{ln}:float32", f"{act}:float32", f"{quote}:float32"]
    assert calls[1][calls[1].index("--tensor-datatypes") + 1:][:2] == [f"{inp}:float16", f"{out}:float16"]
    check = calls[-1]
    assert check[0] == "onnx-precision" and f"{inp}:{SHAPE}" in check and f"{out}:0.1" in check
    # a comment names a node escaped, and shows a command as it would run
    assert f"#   not expressed: node '{for_terminal(quote)}' (Relu) cannot be named in trtexec's" in text
    shown = for_shell(f"--layerPrecisions={act}:fp32")
    assert any(line.startswith("# (not the plan measured) trtexec ") and f" {shown} " in line
               for line in lines)
    assert f"# Shape profile: '{for_terminal(inp)}' min the samples' smallest," in text


def test_the_next_line_runs_the_build_it_names(runs, tmp_path):
    hostile, _ = runs
    line = next(line for line in _terminal_safe(hostile.stdout) if line.startswith("next: "))
    calls = _sandbox(tmp_path, line[len("next: "):] + "\n")
    inp = HOSTILE["input"][0]
    assert calls == [["trtexec", f"--onnx={hostile.out}", "--stronglyTyped",
                      *(f"--{w}Shapes={inp}:{SHAPE}" for w in ("min", "opt", "max"))]]


def test_the_flags_file_reads_back_to_the_same_pins(tmp_path, capsys):
    """(Without the node whose name holds a quote: a ``--layer-precisions`` entry cannot name it.)"""
    names = {**{role: names[0] for role, names in HOSTILE.items()}, "quote": "q"}
    model = _model(str(tmp_path / "m.onnx"), names)
    out, flags, plan = str(tmp_path / "o.onnx"), str(tmp_path / "o.flags"), str(tmp_path / "plan.json")
    assert main([*_convert_args(model, out, flags, names), "--mode", "all-fp16", "-q"]) == 0
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--layer-precisions-file", flags,
                 "--save-plan", plan, "-q"]) == 0, capsys.readouterr().err
    nodes = json.load(open(plan))["nodes"]
    assert {n for n, d in nodes.items() if d["precision"] == "fp32"} == {names["ln"], names["act"], "q"}


def test_the_markdown_report_keeps_every_table_whole(runs):
    hostile, ordinary = runs
    text = open(hostile.out.replace(".onnx", ".report.md"), encoding="utf-8").read()
    assert not UNSAFE.search(text.replace("\n", ""))
    lines = text.splitlines()
    assert len(lines) == len(open(ordinary.out.replace(".onnx", ".report.md"), encoding="utf-8")
                             .read().splitlines())
    width = 0
    for line in lines:  # each row has its header's cells, a '|' inside a name escaped
        if not line.startswith("|"):
            width = 0
            continue
        cells = len(re.split(r"(?<!\\)\|", line))
        width = width or cells
        assert cells == width, line
    act = for_terminal(HOSTILE["act"][0])
    assert f"| `{act}` | Relu |" in text  # a code span in its cell
    out = for_terminal(HOSTILE["output"][0]).replace("|", "\\|")
    assert f"| ``{out}`` |" in text  # its backtick inside a longer fence


def test_the_json_report_and_svg_hold_the_names_as_data(runs):
    hostile, _ = runs
    raw = open(hostile.out.replace(".onnx", ".report.json"), encoding="utf-8").read()
    assert raw.isascii() and not UNSAFE.search(raw.replace("\n", ""))
    report = json.loads(raw)
    assert {HOSTILE[r][0] for r in ("ln", "act", "quote", "output")} <= _strings(report)
    svg = hostile.out.replace(".onnx", ".report.tradeoff.svg")
    if os.path.exists(svg):
        ET.parse(svg)


def _strings(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {s for v in value.values() for s in _strings(v)}
    if isinstance(value, list):
        return {s for v in value for s in _strings(v)}
    return {value} if isinstance(value, str) else set()


# --- the other commands -------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["-q"], ["-v"]])
def test_check_prints_its_lines_and_verdict_one_per_line(runs, capsys, extra):
    hostile, ordinary = runs
    counts = []
    for run in (hostile, ordinary):
        main(["check", run.model, run.out, "--input-shape", f"{run.names['input']}:{SHAPE}", *extra])
        captured = capsys.readouterr()
        counts.append(len(_terminal_safe(captured.out)))
        _terminal_safe(captured.err)
    assert counts[0] == counts[1]


@pytest.mark.parametrize("extra", [["--all", "-v"], ["-q"]])
def test_analyze_prints_its_table_one_row_per_line(runs, capsys, extra):
    hostile, ordinary = runs
    counts = []
    for run in (hostile, ordinary):
        assert main(["analyze", run.model, "--input-shape", f"{run.names['input']}:{SHAPE}", *extra]) == 0
        captured = capsys.readouterr()
        counts.append(len(_terminal_safe(captured.out)))
        _terminal_safe(captured.err)
    assert counts[0] == counts[1]


def test_an_error_naming_the_models_inputs_is_one_escaped_line(runs, capsys, tmp_path):
    hostile, _ = runs
    assert main(["convert", hostile.model, "-o", str(tmp_path / "o.onnx"), "--input-shape",
                 f"{HOSTILE['input'][0]}:{SHAPE}", "--trt-min-shapes", "nope:1x64"]) == 2
    err = capsys.readouterr().err
    assert len(_terminal_safe(err)) == 1
    assert f"(inputs: {for_terminal(HOSTILE['input'][0])})" in err


def test_a_log_line_is_escaped_and_a_traceback_keeps_its_lines():
    import logging
    import sys

    from onnx_precision.cli.common import TerminalFormatter

    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.DEBUG, __file__, 1, "node %s failed", (HOSTILE["act"][0],),
                                   sys.exc_info())
    text = TerminalFormatter("%(message)s").format(record)
    first, *rest = text.splitlines()
    assert first == f"node {for_terminal(HOSTILE['act'][0])} failed"
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"
