"""The README matches the tool: its sample runs print what the tool prints, every flag it and the
pages under docs/ name exists on the command it is given to, and its first commands are the ones CI
runs. (The pages' links and the CLI reference are tests/test_docs.py's.)"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from onnx_precision.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
# The README and every page under docs/, each as written.
PAGES = "".join(open(path, encoding="utf-8").read() for path in
                [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))])
COMMANDS = ("convert", "analyze", "check")
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
SECONDS = re.compile(r"\b\d+\.\d\d s\b")  # the cost line's time, the one figure that varies

# Flags the pages give to other programs, by program.
OTHER_TOOLS = {
    "trtexec": {"--onnx", "--fp16", "--bf16", "--precisionConstraints", "--stronglyTyped", "--inputIOFormats",
                "--outputIOFormats"},
    "polygraphy": {"--onnxrt", "--trt", "--compare", "--snr-threshold", "--strongly-typed", "--save-inputs",
                   "--load-inputs"},
    "python -m models": {"--check"},
}


def _sample_runs() -> list[tuple[str, list[str]]]:
    """Each ``$ `` command of the blocks marked ``<!-- sample-run ... -->``, in README order, with the
    lines shown after it."""
    runs: list[tuple[str, list[str]]] = []
    for block in re.findall(r"<!-- sample-run:.*?-->\n```text\n(.*?)```", README, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                runs.append((line[2:], []))
            else:
                runs[-1][1].append(line)
    return runs


def _help_flags(*command: str) -> set[str]:
    """The flags ``--help`` names: a command's, or with no command the program's own (--version)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*command, "--help"]) == 0
    return set(FLAG.findall(out.getvalue()))


def _command_lines(text: str) -> list[tuple[str, str]]:
    """(command, its arguments) of every ``onnx-precision COMMAND ...`` the text shows, in code
    blocks or inline, up to the closing backtick or quote."""
    text = text.replace("\\\n", " ")
    return re.findall(r"onnx-precision (convert|analyze|check)\b([^`'\n]*)", text)


def test_the_first_commands_install_run_the_sample_and_the_tests_as_ci_does():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first_block is not None and README.index(first_block.group(0)) < README.index("\n## ")
    run_line, test_line = first_block.group(1).splitlines()
    assert run_line.split(" && ")[-1] == _sample_runs()[0][0]
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    install, tests = test_line.split(" && ")[-2:]
    assert tests in ci and install.replace("pip install", "pip install -q") in ci


# The sample runs, one main() call each in one fresh process, in README order; after each, a line of
# _RAN and the exit code it returned.
_RAN = "-- exit code: "
_RUNS = f"""
import json, sys
from onnx_precision.cli import main
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    print({_RAN!r} + str(code), flush=True)
"""


@pytest.mark.slow  # 1.8 s in a full run on 2 busy cores
def test_the_sample_runs_print_what_the_readme_shows(tmp_path):
    runs = _sample_runs()
    assert [shlex.split(c)[:2] for c, _ in runs] == [["onnx-precision", name] for name in
                                                     ("convert", "check", "convert", "check")]
    # One fresh process for the four, not one each (0.7 s of CPU a start): the tool's caches (the FP16
    # kernel probes, whose sessions the first run's cost line counts) start empty for the first, and
    # what the three after it print does not depend on them.
    argvs = [[f"{tmp_path}/{a.removeprefix('/tmp/')}" if a.startswith("/tmp/") else a
              for a in shlex.split(command)[1:]] for command, _ in runs]
    done = subprocess.run([sys.executable, "-c", _RUNS, json.dumps(argvs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed: list[list[str]] = [[]]
    codes = []
    for line in done.stdout.replace(f"{tmp_path}/", "/tmp/").splitlines():
        if line.startswith(_RAN):
            codes.append(int(line.removeprefix(_RAN)))
            printed.append([])
        else:
            printed[-1].append(SECONDS.sub("N s", line))
    assert printed[-1] == [] and len(codes) == len(runs), done.stderr
    for (command, shown), lines, code in zip(runs, printed, codes):
        assert lines == [SECONDS.sub("N s", line) for line in shown], (command, done.stderr)
        assert code == (1 if shown[-1].startswith("FAIL") else 0), (command, done.stderr)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_shown_with_a_command_is_in_its_help(command):
    shown = [(c, args) for c, args in _command_lines(PAGES) if c == command]
    assert shown
    known = _help_flags(command)
    unknown = {flag: args.strip() for _, args in shown for flag in FLAG.findall(args) if flag not in known}
    assert not unknown


def test_every_flag_the_pages_name_belongs_to_a_command_or_to_a_named_tool():
    ours = set().union(_help_flags(), *(_help_flags(c) for c in COMMANDS))
    others = set().union(*OTHER_TOOLS.values())
    assert set(FLAG.findall(PAGES)) - ours - others == set()

