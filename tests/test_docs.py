"""The user's pages hold together: docs/cli.md is what the parser says, every relative link in the
README and docs/ lands on a file and an anchor that exist, every page is reachable from the README,
and the README stays a guide (a map first, short paragraphs, the tool as it is, not its history)."""

from __future__ import annotations

import glob
import os
import re
import sys
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cli_reference  # noqa: E402

PAGES = ["README.md",
         *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def _prose(text: str) -> str:
    """The text without its code blocks and inline code, where '#' and '[x](y)' are not Markdown."""
    return re.sub(r"`[^`]+`", "``", FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation but '-' and '_' dropped, spaces
    as hyphens, a repeated one numbered -1, -2, ... in page order."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in re.findall(r"^#{1,6} +(.*?)#*[ \t]*$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def test_the_cli_reference_is_what_the_parser_says():
    with open(cli_reference.PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == cli_reference.render(), (
        f"docs/cli.md is not what the parser says (an option was added, renamed or regrouped): "
        f"run `{cli_reference.REGENERATE}` and commit docs/cli.md")


def test_the_cli_reference_has_every_option_of_every_command():
    page = _read("docs/cli.md")
    for name, _, parser in cli_reference.subcommands(cli_reference.build_parser()):
        section = page.split(f"\n## onnx-precision {name}\n", 1)[1].split("\n## ", 1)[0]
        options = {s for action in parser._actions for s in action.option_strings} - {"-h", "--help"}
        assert options and {s for s in options if f"`{s}`" not in section} == set(), name


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_lands_on_a_file_and_an_anchor(page):
    text = _read(page)
    broken = []
    for target in LINK.findall(_prose(text)):
        if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        landing = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, landing)):
            broken.append(f"{target}: no file {landing}")
        elif anchor and not (landing.endswith(".md") and anchor in anchors(_read(landing))):
            broken.append(f"{target}: no heading '#{anchor}' in {landing}")
    assert broken == []


def test_every_page_under_docs_is_reached_from_the_readme():
    linked = {os.path.normpath(t.partition("#")[0]) for t in LINK.findall(_prose(_read("README.md")))}
    assert [page for page in PAGES[1:] if page not in linked] == []


def test_the_anchors_are_githubs():
    text = "# A `--flag` to B\n## Why? (FP16)\n```\n# not a heading\n```\n## Why? (FP16)\n### x_y.z\n"
    assert anchors(text) == {"a---flag-to-b", "why-fp16", "why-fp16-1", "x_yz"}


def _readme_paragraphs() -> list[str]:
    """The README's paragraphs and list items, as prose: no code, tables or headings."""
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.) )", _prose(_read("README.md")))
    return [" ".join(b.split()) for b in blocks
            if b.strip() and not b.lstrip().startswith(("#", "|", "<!--"))]


def test_the_readme_is_a_guide_with_a_map_first():
    text = _read("README.md")
    assert len(text.splitlines()) < 300
    sections = re.findall(r"^## (.*)$", FENCE.sub("", text), re.M)
    assert sections[0] == "Where to go"
    # The map leads to every section a user comes for (Install and Development are for everyone).
    map_ = text.split("## Where to go", 1)[1].split("\n## ", 1)[0]
    mapped = {a for t in LINK.findall(map_) for a in [t.partition("#")[2]] if a}
    readme_anchors = anchors(text)
    assert mapped <= readme_anchors
    assert len(mapped) >= 7


def test_the_readme_paragraphs_are_short():
    long = [p[:60] for p in _readme_paragraphs() if len(p.split()) > 70]
    assert long == []


def test_the_readme_states_the_tool_as_it_is_not_its_history():
    history = re.compile(r"\b(was|were|used to|no longer|formerly|previously|now)\b|\bbefore,|"
                         r"\b(since|from|as of) (commit )?[0-9a-f]{7,40}\b", re.I)
    said = [m.group(0) for p in _readme_paragraphs() for m in history.finditer(p)]
    assert said == []


@pytest.mark.parametrize("page", PAGES[1:])
def test_no_page_narrates_how_the_code_used_to_be(page):
    """The pages may say what a run "was" (a measurement); they do not tell the code's past ("Before,
    one touched seven files ... Now: one")."""
    history = re.compile(r"\bBefore,|\bNow[,:]|\bno longer\b|\bused to\b|"
                         r"\b(since|as of) (commit )?[0-9a-f]{7,40}\b")
    assert [m.group(0) for m in history.finditer(_prose(_read(page)))] == []
