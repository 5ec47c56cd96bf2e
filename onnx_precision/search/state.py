"""The search for a small set of nodes to keep in FP32, as a pure state object.

:class:`PinSearch` knows nothing of models, sessions or files. It proposes a *pinned set* (the
searchable nodes to keep FP32, on top of whatever the caller always keeps FP32), the caller
probes it (does every sample pass with those nodes pinned?) and reports back with ``step``::

    search = PinSearch(candidates, widen_order)
    while (pinned := search.select()) is not None:
        search.step(probe(pinned))
    outcome = search.outcome()

This is Polygraphy's ``debug precision`` state (``select`` / ``step`` / ``remaining``), but over
*sets* of nodes rather than a count of leading layers, so culprits far apart in the graph are
found together. The phases:

1. ``start``: nothing pinned. If that passes the search is over.
2. ``candidates``: pin every candidate (rules, ranges, first divergence).
3. ``widen``: while it fails, add the next nodes of ``widen_order`` (largest layerwise error
   first) in doubling steps, then bisect the prefix length between the last failing and the first
   passing step. If even everything pinned fails, the search fails.
4. ``shrink``: delta debugging (Zeller's ddmin) over the passing set, down to a *1-minimal* one:
   un-pinning any single node of it makes the probe fail.

Results are cached by set, and a set that is a subset of one known to fail is taken to fail
without a probe: pinning fewer nodes to FP32 never makes FP16 more accurate. That assumption only
ever skips probes that would shrink further, so the final set still comes from a real passing
probe.

With a ``cost`` per node (estimated FLOPs), the shrink tries to keep the cheap pins and drop the
expensive ones first, so among 1-minimal sets it finds one that keeps more compute in FP16. With a
``max_probes`` budget (or :meth:`PinSearch.stop`), the search ends early with the cheapest passing
set probed so far, marked ``exhausted`` (it is then not proven 1-minimal).

ddmin proves each pin it keeps with a probe of its own, twice over in practice: on a model where
most nodes must stay FP32 (a vocoder whose phase drifts with any 16-bit node: 1988 pins) that is
thousands of probes, hours, to win nothing. So above :data:`BOUNDED_ABOVE` pins the shrink spends
a probe only where it can win (:meth:`PinSearch._bounded`): it un-pins groups, the most expensive
first, halving a group that fails, but never one holding less than :data:`MIN_WIN` of the total
cost; then tries their pins alone while that wins (:data:`ALONE_RUN`). The pins never tried alone
stay FP32 (``untried``), each with the failing probe of the group it was last tried in.
``exhaustive`` runs ddmin whatever the size.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import InternalError

PinnedSet = frozenset  # of node names

START, CANDIDATES, WIDEN, SHRINK = "start", "candidates", "widen", "shrink"

# A passing set of more pins than this is shrunk by :meth:`PinSearch._bounded`, not ddmin: ddmin costs
# about two probes per pin it keeps (Kokoro-82M int8: 1988 pins, ~4000 probes of 3-7 s). The example
# models' sets hold at most 6 pins; tests/test_search.py shrinks 200 with ddmin.
BOUNDED_ABOVE = 256
# The least share of the total cost a group the bounded shrink un-pins may hold: its groups then take
# at most about 2 / MIN_WIN probes (Kokoro-82M int8, measured: 138 search probes in all, 286 s).
MIN_WIN = 0.01
# The bounded shrink then tries the pins of the groups it did not split alone, while that wins: it
# stops once ALONE_RUN tries in a row un-pin less than ALONE_MIN_WIN of the total cost together (a
# model where most pins are needed pays ALONE_RUN probes; one where single pins can go, a probe each).
ALONE_RUN = 16
ALONE_MIN_WIN = 0.001


@dataclass(frozen=True)
class Probe:
    """One evaluated pinned set, in the order probes ran."""

    index: int
    phase: str
    pinned: PinnedSet
    passed: bool
    detail: str = ""  # e.g. which sample and output failed


@dataclass(frozen=True)
class PinEvidence:
    """Why a node of the final set is needed: the probe showing that un-pinning it fails."""

    node: str
    probe: int  # index of a failing probe whose pinned set lacks this node but has the rest
    detail: str


@dataclass(frozen=True)
class SearchOutcome:
    passed: bool  # False: even pinning every searchable node fails (or no probe passed in budget)
    pinned: tuple[str, ...]  # in the caller's node order
    evidence: tuple[PinEvidence, ...]  # one per pinned node (probe -1: not tested alone, the detail says why)
    probes: tuple[Probe, ...]
    exhausted: str = ""  # why the search stopped early ("" when it finished)
    untried: tuple[str, ...] = ()  # pins the bounded shrink did not try alone (not proven needed)
    untried_share: float = 0.0  # their share of the total cost

    @property
    def probes_run(self) -> int:
        return len(self.probes)


Query = Generator[PinnedSet, bool, None]


class PinSearch:
    """Find a 1-minimal set of nodes to pin, given candidates and an order to widen in."""

    def __init__(self, candidates: Iterable[str], widen_order: Iterable[str] = (),
                 start_failed: str | None = None, cost: Mapping[str, float] | None = None,
                 max_probes: int | None = None, total_cost: float | None = None,
                 exhaustive: bool = False) -> None:
        """``start_failed``: the caller already probed the empty set and it failed (the detail);
        it is recorded as the first probe instead of being proposed again. ``cost``: what keeping
        each node in FP32 costs (its FLOPs); ``max_probes``: a budget, the start probe included.
        ``total_cost``: the model's (the bounded shrink's :data:`MIN_WIN` is a share of it; default:
        the cost of every node named); ``exhaustive``: shrink to a 1-minimal set whatever its size."""
        self._cost = dict(cost or {})
        self._exhaustive = exhaustive
        # pin -> (the failing probe of the group it was last tried in, that group's size)
        self._untried: dict[str, tuple[int, int]] = {}
        self._max_probes = max_probes
        self._exhausted = ""
        self._candidates = _unique(candidates)
        chosen = set(self._candidates)
        self._widen_order = [n for n in _unique(widen_order) if n not in chosen]
        # Node order of the final answer: candidates first, then widening order.
        self._rank = {n: i for i, n in enumerate(self._candidates + self._widen_order)}
        self._total_cost = self.cost_of(self._rank) if total_cost is None else total_cost
        self._known: dict[PinnedSet, Probe] = {}
        self._failed_sets: list[PinnedSet] = []
        self._probes: list[Probe] = []
        self._phase = START
        self._estimate = 1
        self._result: list[str] | None = None
        self._gen: Query = self._run()
        self._pending: PinnedSet | None = None
        first = next(self._gen, None)
        if start_failed is not None:
            self._pending = first
            self.step(False, start_failed)
        else:
            self._advance(first)

    # --- the state interface --------------------------------------------------------------------

    def select(self) -> PinnedSet | None:
        """The pinned set to probe next, or None when the search is over."""
        return self._pending

    def step(self, passed: bool, detail: str = "") -> None:
        """Record the result of probing :meth:`select`'s set."""
        if self._pending is None:
            raise InternalError("PinSearch.step() called after the search finished")
        probe = Probe(len(self._probes), self._phase, self._pending, bool(passed), detail)
        self._probes.append(probe)
        self._known[probe.pinned] = probe
        if not probe.passed:
            self._failed_sets.append(probe.pinned)
        self._advance(self._send(probe.passed))
        budget = self._max_probes
        if self._pending is not None and budget is not None and len(self._probes) >= budget:
            self.stop(f"the probe budget ({budget}) ran out")

    def stop(self, why: str) -> None:
        """End the search now (a time budget, say): the outcome is the cheapest passing set probed."""
        if self._pending is not None:
            self._pending = None
            self._exhausted = why

    def cost_of(self, pinned: Iterable[str]) -> float:
        """What keeping ``pinned`` in FP32 costs (their total cost; one per node without a cost)."""
        return sum(self._cost.get(n, 1.0) for n in pinned)

    @property
    def phase(self) -> str:
        return self._phase

    @property
    def remaining(self) -> int:
        """An estimate of the probes still to run (for progress display; 0 when done)."""
        return 0 if self._pending is None else max(1, self._estimate)

    @property
    def probes_run(self) -> int:
        return len(self._probes)

    @property
    def done(self) -> bool:
        return self._pending is None

    def outcome(self) -> SearchOutcome:
        if self._pending is not None:
            raise InternalError("PinSearch.outcome() called before the search finished")
        result = self._result
        if self._exhausted:
            passing = [(self.cost_of(p.pinned), len(p.pinned), p.index) for p in self._probes if p.passed]
            result = list(self._probes[min(passing)[2]].pinned) if passing else None
        if result is None:
            return SearchOutcome(False, (), (), tuple(self._probes), self._exhausted)
        pinned = tuple(sorted(result, key=self._rank.__getitem__))
        evidence = tuple(self._evidence(n, frozenset(pinned)) for n in pinned)
        # a search cut short is not proven minimal anyway (its ``exhausted`` says so)
        untried = () if self._exhausted else tuple(n for n in pinned if n in self._untried)
        share = self.cost_of(untried) / self._total_cost if self._total_cost > 0 else 0.0
        return SearchOutcome(True, pinned, evidence, tuple(self._probes), self._exhausted, untried, share)

    # --- driving the generator ------------------------------------------------------------------

    def _send(self, passed: bool) -> PinnedSet | None:
        try:
            return self._gen.send(passed)
        except StopIteration:
            return None

    def _advance(self, query: PinnedSet | None) -> None:
        # Answer queries from the cache (or by monotonicity) until one needs a real probe.
        while query is not None:
            known = self._lookup(query)
            if known is None:
                break
            query = self._send(known)
        self._pending = query

    def _lookup(self, pinned: PinnedSet) -> bool | None:
        probe = self._known.get(pinned)
        if probe is not None:
            return probe.passed
        if any(pinned <= failed for failed in self._failed_sets):
            return False
        return None

    def _evidence(self, node: str, pinned: PinnedSet) -> PinEvidence:
        without = pinned - {node}
        exact = self._known.get(without)
        if exact is not None and not exact.passed:
            return PinEvidence(node, exact.index, exact.detail)
        for probe in self._probes:  # a failing superset of `without` that still lacks `node`
            if not probe.passed and without <= probe.pinned and node not in probe.pinned:
                return PinEvidence(node, probe.index, probe.detail)
        if node in self._untried:
            index, size = self._untried[node]
            probe = self._probes[index]
            return PinEvidence(node, -1, f"not tried alone: un-pinning it with {size - 1} other pin(s) "
                                         f"fails: {probe.detail} (probe {index})")
        if self._exhausted:
            return PinEvidence(node, -1, "not tested: the search stopped before trying without it")
        raise InternalError(f"no failing probe shows that '{node}' is needed")  # ddmin guarantees one

    # --- the search itself ----------------------------------------------------------------------

    def _run(self) -> Query:
        self._phase, self._estimate = START, 2
        if (yield frozenset()):
            self._result = []
            return
        pinned = list(self._candidates)
        if pinned:
            self._phase, self._estimate = CANDIDATES, 1
            passed = yield frozenset(pinned)
        else:
            passed = False
        if not passed:
            widened = yield from self._widen(pinned)
            if widened is None:
                return
            pinned = widened
        self._phase = SHRINK
        if len(pinned) > BOUNDED_ABOVE and not self._exhaustive:
            self._result = yield from self._bounded(pinned)
            return
        if self._cost:  # cheap pins first: ddmin tries keeping the leading chunks before the rest
            pinned = sorted(pinned, key=lambda n: self._cost.get(n, 1.0))
        self._result = yield from self._ddmin(pinned)

    def _widen(self, base: list[str]) -> Generator[PinnedSet, bool, list[str] | None]:
        """Add widening nodes in doubling steps, then bisect the shortest passing prefix."""
        self._phase = WIDEN
        order = self._widen_order
        failing, k = 0, 1
        while True:
            k = min(k, len(order))
            if k == 0:
                return None
            self._estimate = int(math.log2(max(len(order) // k, 1))) + 1
            if (yield frozenset(base + order[:k])):
                break
            if k == len(order):
                return None
            failing, k = k, 2 * k
        passing = k
        while passing - failing > 1:
            self._estimate = int(math.log2(passing - failing)) + 1
            mid = (failing + passing) // 2
            if (yield frozenset(base + order[:mid])):
                passing = mid
            else:
                failing = mid
        return base + order[:passing]

    def _ddmin(self, items: list[str]) -> Generator[PinnedSet, bool, list[str]]:
        """Shrink a passing set to a 1-minimal passing one (Zeller and Hildebrandt's ddmin)."""
        n = 2
        while len(items) >= 2:
            chunks = _split(items, n)
            # With two chunks each complement is the other chunk, so subsets cover both.
            trials = [(c, 2) for c in chunks]
            if n > 2:
                trials += [(_without(items, c), max(n - 1, 2)) for c in chunks]
            self._estimate = len(trials) + 2 * int(math.log2(max(len(items) // n, 1)))
            for trial, next_n in trials:
                self._estimate = max(1, self._estimate - 1)
                if (yield frozenset(trial)):
                    items, n = trial, next_n
                    break
            else:
                if n >= len(items):
                    break
                n = min(2 * n, len(items))
        return items


    def _bounded(self, items: list[str]) -> Generator[PinnedSet, bool, list[str]]:
        """Shrink a passing set by un-pinning groups, most expensive first, halving (by cost) a group
        that fails, down to single pins; a group under :data:`MIN_WIN` of the total cost is not
        split. Then the pins of such groups are tried alone, until :data:`ALONE_RUN` tries in a row
        win less than :data:`ALONE_MIN_WIN`; the pins left stay (``self._untried``).
        A single pin tried and failing is needed in the final set too (a subset of a failing set
        fails), so those keep their evidence."""
        floor = MIN_WIN * self._total_cost
        pinned = set(items)
        # expensive first; ties in the search's order, so the result is deterministic
        order = sorted(items, key=lambda n: (-self._cost.get(n, 1.0), self._rank[n]))
        todo = [order]
        while todo:
            group = todo.pop(0)
            self._estimate = max(1, int(2 * self.cost_of(pinned) / floor)) if floor > 0 else len(pinned)
            trial = frozenset(pinned.difference(group))
            if (yield trial):
                pinned -= set(group)
                continue
            known = self._known.get(trial)
            # failing by monotonicity otherwise: the failing probe that holds it
            failed = known.index if known is not None else next(
                p.index for p in self._probes if not p.passed and trial <= p.pinned)
            if len(group) == 1:
                continue
            halves = _halve(group, self._cost)
            for half in halves:
                if self.cost_of(half) < floor:
                    self._untried.update(dict.fromkeys(half, (failed, len(group))))
            todo[:0] = [h for h in halves if self.cost_of(h) >= floor]
        # alone in the groups' order (expensive first). The pins share one error budget, so the order
        # decides which go: the least layerwise error first measured mixed on two synthetic phase chains
        # (10.6% against 45.5% of the FLOPs FP16 on one, 12.9% against 3.0% on the other)
        alone = [n for n in order if n in self._untried]
        won: list[float] = []  # what each try alone un-pinned, in order
        for name in alone:
            if len(won) >= ALONE_RUN and sum(won[-ALONE_RUN:]) < ALONE_MIN_WIN * self._total_cost:
                break
            self._estimate = ALONE_RUN
            del self._untried[name]  # tried alone now: needed, or gone
            passed = yield frozenset(pinned - {name})
            won.append(self._cost.get(name, 1.0) if passed else 0.0)
            if passed:
                pinned.discard(name)
        return [n for n in items if n in pinned]


def _halve(items: Sequence[str], cost: Mapping[str, float]) -> list[list[str]]:
    """``items`` in two non-empty contiguous halves of near-equal total cost (order kept)."""
    total = sum(cost.get(n, 1.0) for n in items)
    acc, cut = 0.0, 1
    for i, name in enumerate(items[:-1]):
        acc += cost.get(name, 1.0)
        cut = i + 1
        if acc >= total / 2:
            break
    return [list(items[:cut]), list(items[cut:])]


def _unique(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for name in names:
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def _without(items: Sequence[str], drop: Sequence[str]) -> list[str]:
    dropped = set(drop)
    return [x for x in items if x not in dropped]


def _split(items: Sequence[str], n: int) -> list[list[str]]:
    """``items`` in ``n`` contiguous chunks of near-equal size (order kept)."""
    size, extra = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(list(items[start:end]))
        start = end
    return [c for c in chunks if c]
