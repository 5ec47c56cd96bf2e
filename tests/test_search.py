"""The pin search state object, driven by fake predicates (no models, no sessions)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Callable

import pytest

from onnx_precision.errors import InternalError
from onnx_precision.search import CANDIDATES, SHRINK, START, WIDEN, PinSearch

NODES = [f"n{i:03d}" for i in range(200)]


def drive(search: PinSearch, passes: Callable[[frozenset], bool]) -> list[frozenset]:
    probed = []
    while (pinned := search.select()) is not None:
        probed.append(pinned)
        search.step(passes(pinned), detail=f"probe of {len(pinned)}")
    return probed


def needs_all(*culprits: str) -> Callable[[frozenset], bool]:
    return lambda pinned: set(culprits) <= pinned


def assert_one_minimal(pinned: Iterable[str], passes: Callable[[frozenset], bool]) -> None:
    pinned = frozenset(pinned)
    assert passes(pinned)
    for node in pinned:
        assert not passes(pinned - {node}), f"{node} could be un-pinned"


def test_nothing_to_pin_stops_after_one_probe():
    search = PinSearch(NODES[:10], NODES)
    probed = drive(search, lambda pinned: True)
    outcome = search.outcome()
    assert probed == [frozenset()]
    assert outcome.passed and outcome.pinned == () and outcome.probes_run == 1


def test_two_independent_culprits_among_200_candidates():
    passes = needs_all("n017", "n150")
    search = PinSearch(NODES, NODES)
    drive(search, passes)
    outcome = search.outcome()
    assert outcome.passed
    assert outcome.pinned == ("n017", "n150")
    assert_one_minimal(outcome.pinned, passes)
    # Delta debugging is logarithmic in the set size for few culprits; 200 single-node probes
    # (or a probe per subset) would mean the search degenerated.
    assert outcome.probes_run <= 40, outcome.probes_run


def test_verdict_names_the_failing_probe_for_each_pin():
    passes = needs_all("n003", "n077")
    search = PinSearch(NODES[:100], NODES)
    drive(search, passes)
    outcome = search.outcome()
    by_node = {v.node: v for v in outcome.evidence}
    assert set(by_node) == {"n003", "n077"}
    for node, verdict in by_node.items():
        probe = outcome.probes[verdict.probe]
        assert not probe.passed and node not in probe.pinned
        assert (set(outcome.pinned) - {node}) <= probe.pinned


def test_interacting_culprits_either_one_suffices():
    # Pinning a or b alone fixes the output (b feeds a); the 1-minimal answer keeps one of them.
    def passes(pinned):
        return ("n010" in pinned or "n011" in pinned) and "n120" in pinned

    search = PinSearch(NODES, NODES)
    drive(search, passes)
    outcome = search.outcome()
    assert len(outcome.pinned) == 2 and "n120" in outcome.pinned
    assert_one_minimal(outcome.pinned, passes)


def test_interacting_culprits_only_together():
    # A pair that must be pinned together (a tensor and its consumer), plus a third node.
    passes = needs_all("n050", "n051", "n199")
    search = PinSearch(NODES, NODES)
    drive(search, passes)
    assert search.outcome().pinned == ("n050", "n051", "n199")


def test_widening_when_candidates_miss_a_culprit():
    # The rules flagged n000..n009 but the culprit is n042, seventh in layerwise-error order.
    passes = needs_all("n003", "n042")
    order = ["n100", "n101", "n102", "n103", "n104", "n105", "n042"] + NODES
    search = PinSearch(NODES[:10], order)
    drive(search, passes)
    outcome = search.outcome()
    assert outcome.pinned == ("n003", "n042")
    phases = [p.phase for p in outcome.probes]
    assert phases[:2] == [START, CANDIDATES] and WIDEN in phases and phases[-1] == SHRINK
    widened = [p for p in outcome.probes if p.phase == WIDEN]
    # Doubling 1, 2, 4, 8 then bisecting between 4 and 8 finds the prefix of 7.
    assert [len(p.pinned) - 10 for p in widened] == [1, 2, 4, 8, 6, 7]


def test_no_candidates_goes_straight_to_widening():
    passes = needs_all("n005")
    search = PinSearch([], NODES[:20])
    drive(search, passes)
    outcome = search.outcome()
    assert outcome.pinned == ("n005",)
    assert [p.phase for p in outcome.probes][1] == WIDEN


def test_failing_even_with_everything_pinned():
    search = PinSearch(NODES[:5], NODES[:30])
    probed = drive(search, lambda pinned: False)
    outcome = search.outcome()
    assert not outcome.passed and outcome.pinned == ()
    assert probed[-1] == frozenset(NODES[:30])  # the last probe pinned everything
    assert outcome.probes_run <= 8


def test_each_set_probed_at_most_once():
    passes = needs_all("n001", "n002", "n100", "n101", "n180")
    search = PinSearch(NODES, NODES)
    probed = drive(search, passes)
    assert len(probed) == len(set(probed))
    assert_one_minimal(search.outcome().pinned, passes)


def test_remaining_counts_down_to_zero():
    search = PinSearch(NODES, NODES)
    passes = needs_all("n030", "n160")
    while search.select() is not None:
        assert search.remaining >= 1
        search.step(passes(search.select()))
    assert search.remaining == 0 and search.done


def test_step_after_done_is_an_error():
    search = PinSearch([], [])
    search.step(True)
    with pytest.raises(InternalError):
        search.step(True)


@pytest.mark.parametrize("culprits", [("n000",), ("n199",), ("n000", "n199"),
                                      ("n010", "n011", "n012", "n013")])
def test_result_matches_culprits_exactly(culprits):
    passes = needs_all(*culprits)
    search = PinSearch(NODES, NODES)
    drive(search, passes)
    assert search.outcome().pinned == tuple(culprits)
