"""Clustered Operators Scheduling (COS): operators grouped by S-means on (cost, selectivity), Chain
inside each cluster, clusters sharing the processor round-robin (Soliman & Tan, 2011, §3–4).

Features (§4.3): each operator is the point (cost, selectivity). Costs of one plan span orders of
magnitude, so cost is taken on a log scale; both coordinates are then min–max normalised over
the plan's operators onto [0, 1] (a coordinate that does not vary is 0), so neither dominates
the distance and the threshold means the same on every plan.

Similarity (§3.2, eq 2) is the RBF kernel sim(x, c) = exp(−‖x − c‖² / (2·width²)). §3.2 states
the S-means rule as "similarity ≥ T"; §4.2 states the knob the other way round (a small T gives
one cluster per operator, OTS; a large T one cluster, GTS). We follow §4.2: ``T`` is the
dissimilarity 1 − sim an operator may have to its cluster's centre, so T = 0 clusters only
identical operators and T = 1 puts every operator in one cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sparkqos.errors import SchedulerError, check_number
from sparkqos.model.plan import Plan
from sparkqos.model.state import SchedulerState, Unit
from sparkqos.schedulers.base import ClusterScheduler, LazyHeap
from sparkqos.schedulers.chain import Chain

Point = tuple[float, float]


def operator_features(
    plan: Plan,
    selectivity: Callable[[str], float],
    cost: Callable[[str], float],
) -> list[Point]:
    """Normalised (log cost, selectivity) of every operator, in plan order (module docstring).

    >>> from sparkqos.sim import chain_plan
    >>> plan = chain_plan([(0.5, 1.0), (0.1, 10.0), (0.3, 100.0)])
    >>> operator_features(plan, lambda o: plan[o].selectivity, lambda o: plan[o].cost)
    [(0.0, 1.0), (0.5, 0.0), (1.0, 0.5)]
    """
    raw = [(math.log(cost(op)), selectivity(op)) for op in plan.names]

    def scale(values: list[float]) -> list[float]:
        low, high = min(values), max(values)
        if high - low <= 1e-12 * max(1.0, abs(high)):
            return [0.0] * len(values)
        return [(v - low) / (high - low) for v in values]

    xs = scale([x for x, _ in raw])
    ys = scale([y for _, y in raw])
    return [(round(x, 12), round(y, 12)) for x, y in zip(xs, ys)]


def rbf_similarity(a: Point, b: Point, width: float) -> float:
    """exp(−‖a − b‖² / (2·width²)) — 1 for identical points, towards 0 far apart (COS eq 2)."""
    d2 = (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2
    return math.exp(-d2 / (2.0 * width * width))


def _renumbered(best: np.ndarray, k: int, x: np.ndarray, y: np.ndarray) -> tuple[list[int], list[Point], np.ndarray]:
    """The non-empty ones of ``k`` clusters (``best``: each point's) renumbered by first member:
    (labels, each centre moved to its members' mean, the old centre of each new label)."""
    used, first = np.unique(best, return_index=True)
    old_of = used[np.argsort(first, kind="stable")]  # old centre of each new label, in order
    renumber = np.empty(k, dtype=np.int64)
    renumber[old_of] = np.arange(len(old_of))
    lab_arr = renumber[best]
    centres = []
    for m in range(len(old_of)):
        mask = lab_arr == m
        size = int(np.count_nonzero(mask))
        centres.append((math.fsum(x[mask].tolist()) / size, math.fsum(y[mask].tolist()) / size))
    return lab_arr.tolist(), centres, old_of


def s_means(points: Sequence[Point], T: float, width: float = 0.25, max_iter: int = 100) -> list[int]:
    """Cluster label of every point by S-means (COS §3.2), labels numbered by first member.

    K starts at 1 with the centre at the mean of all points. Each pass visits the points in order
    and puts a point in the cluster of its most similar centre when its dissimilarity 1 − sim is
    at most ``T``; otherwise the point opens a new cluster centred on itself, which later points
    of the same pass may join. Then every centre moves to the mean of its members and empty
    clusters are removed. It stops when a pass opens no cluster, moves no point and no centre
    (or after ``max_iter`` passes). Deterministic: no random initialisation.

    A point's most similar centre is its nearest (the RBF kernel falls with distance; the first
    one on equal distances, as a scan in order finds it), and the threshold test uses
    :func:`rbf_similarity` itself. A pass is a few numpy steps: every point against the centres
    it started with at once, then, each time a point opens a cluster, the points after it
    against that new centre. Centres are exact means (``math.fsum``). (The plain point-by-point
    loop took most of the executor's lock time on the cos experiment's 400 operators, when COS
    re-clustered on every statistics move.)

    >>> pts = [(0.0, 0.0), (0.05, 0.0), (1.0, 1.0), (0.95, 1.0)]
    >>> s_means(pts, T=0.3), s_means(pts, T=0.0), s_means(pts, T=1.0)
    ([0, 0, 1, 1], [0, 1, 2, 3], [0, 0, 0, 0])
    """
    if not points:
        return []
    n = len(points)
    xy = np.asarray(points, dtype=np.float64).reshape(n, 2)
    x, y = xy[:, 0], xy[:, 1]
    pts = [(float(a), float(b)) for a, b in xy]
    centres: list[Point] = [(math.fsum(x.tolist()) / n, math.fsum(y.tolist()) / n)]
    labels: list[int] = [-1] * n
    limit = T + 1e-12
    spread = 2.0 * width * width
    for _ in range(max_iter):
        cx = np.array([c[0] for c in centres])
        cy = np.array([c[1] for c in centres])
        d2 = (x[:, None] - cx[None, :]) ** 2 + (y[:, None] - cy[None, :]) ** 2  # as rbf_similarity
        best = np.argmin(d2, axis=1)  # the first nearest
        best_d2 = d2[np.arange(n), best]
        opened = False
        i = 0
        while i < n:
            # The first point from i whose nearest centre is too far: numpy's exp may differ from
            # math's in the last bit, so only points clearly inside are decided by it.
            near = 1.0 - np.exp(-best_d2[i:] / spread)
            opens = n
            for j in (np.flatnonzero(near > limit - 1e-9) + i).tolist():
                if 1.0 - rbf_similarity(pts[j], centres[best[j]], width) > limit:
                    opens = j
                    break
            if opens == n:
                break
            opened = True
            centres.append(pts[opens])
            best[opens], best_d2[opens] = len(centres) - 1, 0.0
            # The points after it compare the new centre with their nearest so far (which comes
            # first, so it keeps equal distances).
            px, py = pts[opens]
            dn = (x[opens + 1 :] - px) ** 2 + (y[opens + 1 :] - py) ** 2
            closer = np.flatnonzero(dn < best_d2[opens + 1 :]) + opens + 1
            best[closer] = len(centres) - 1
            best_d2[closer] = dn[closer - opens - 1]
            i = opens + 1
        new_labels, new_centres, old_of = _renumbered(best, len(centres), x, y)
        moved = len(new_centres) != len(centres) or any(
            abs(c[0] - centres[old][0]) > 1e-12 or abs(c[1] - centres[old][1]) > 1e-12
            for c, old in zip(new_centres, old_of.tolist())
        )
        stable = not opened and not moved and new_labels == labels
        labels, centres = new_labels, new_centres
        if stable:
            break
    return labels


class Cos(ClusterScheduler):
    """Clusters of similar operators, each served by Chain, taking turns round-robin.

    :attr:`clusters` lists the operators of each cluster (plan order); one pick serves the next
    cluster, in cyclic order, that has a runnable operator — its highest-Chain-priority operator
    (ties to the oldest tuple, then the one furthest along its path) — so in the simulator the
    clusters share the processor quantum by quantum. :meth:`pick_cluster` picks inside one given
    cluster, for an executor that runs each cluster in its own thread (COS §4.2, second level).
    Clusters and Chain's order inside them follow the statistics at most once per
    ``recluster_period``: a move within it is taken in at the first pick after it, and meanwhile
    every runnable operator is still offered, in the order of the last rebuild.

    Below, the slow O1 is a cluster of its own and the cheap, selective O2 and O3 form another,
    so the two clusters alternate: where Chain alone pushes the first tuple through O1, O2, O3
    before starting the second, COS gives O1 its next turn as soon as O2 has had one.

    >>> from sparkqos.sim import Simulator, chain_plan
    >>> plan = chain_plan([(0.9, 2.0), (0.1, 0.25), (0.2, 0.2)])
    >>> cos = Cos(T=0.3)
    >>> sim = Simulator(plan, cos, {"S": [(0, 2.0)]}, run="one", record_dispatches=True)
    >>> _ = sim.run()
    >>> cos.clusters
    [('O1',), ('O2', 'O3')]
    >>> [d.unit.head for d in sim.dispatches]
    ['O1', 'O2', 'O1', 'O3', 'O2', 'O3']
    """

    def __init__(self, T: float = 0.3, width: float = 0.25, recluster_tolerance: float = 0.02, recluster_period: float = 1.0):
        check_number("T", T, low=0, high=1, error=SchedulerError, where="Cos: ")
        check_number("width", width, low=0, low_open=True, error=SchedulerError, where="Cos: ")
        check_number("recluster_tolerance", recluster_tolerance, low=0, error=SchedulerError, where="Cos: ")
        check_number("recluster_period", recluster_period, low=0, error=SchedulerError, where="Cos: ")
        self.T = T
        self.width = width
        #: S-means runs again only when some operator's normalised (log cost, selectivity) moved
        #: more than this since the last clustering (0: whenever the statistics move). Chain's
        #: priorities inside the clusters are refreshed on every move either way. On large plans
        #: the statistics move on almost every run, and clustering is the costly part of a pick.
        self.recluster_tolerance = float(recluster_tolerance)
        #: ... and only when at least this long (``state.now``: seconds in the executor) passed
        #: since the last clustering (0: no wait); Chain's priorities inside the clusters follow
        #: the statistics at most this often too. The tolerance alone is not enough: a cost
        #: estimate reaches strategies only when it moves by 20%, a step of about 0.04 on the
        #: normalised log-cost axis, so nearly every statistics move would re-cluster, under the
        #: executor's lock that the cluster threads share; and on a large plan (hundreds of
        #: operators) some estimate moves every few runs, where Chain's envelopes over every path
        #: and the heaps take milliseconds under that lock, holding the GIL. The default is the
        #: statistics window (thesis §3.2.5: one second): clusters and their order follow the
        #: statistics at the pace they are gathered. The simulator's statistics never move.
        self.recluster_period = float(recluster_period)
        self._clustered_on: np.ndarray | None = None  # the features of the last clustering
        self._clustered_at = -math.inf  # state.now at the last clustering
        self._plan_seen: Plan | None = None
        self._remaining: dict[str, int] = {}
        self._clusters: list[tuple[str, ...]] = []
        self._heaps: list[LazyHeap] = []
        self._cluster_of: dict[str, int] = {}
        self._units: dict[str, Unit] = {}
        self._cursor = 0
        self._rebuilt_at = -math.inf  # state.now at the last rebuild
        self._stale = False  # the statistics moved since the last rebuild, within recluster_period of it

    def _catch_up(self, state: SchedulerState) -> None:
        """As every strategy's, except that a statistics move within ``recluster_period`` of the
        last rebuild waits for the first pick after the period. Meanwhile the heaps take in every
        runnable operator, as a rebuild would: an owner that rebuilds itself on the move (class
        shares) hands the operators that received tuples to no event log, leaving that to the
        rebuild."""
        if state is self._state and state.plan is self._plan_seen:
            due = state.now - self._rebuilt_at >= self.recluster_period
            if state.stats_version != self._stats_seen and not due:
                self._stats_seen = state.stats_version
                self._stale = True
                self._log.clear()
                for op in state.runnable_operators():
                    self._heaps[self._cluster_of[op]].ensure(op)
            elif self._stale and due:
                self._stats_seen = -1  # rebuilds below
        super()._catch_up(state)

    def _rebuild(self, state: SchedulerState) -> None:
        self._rebuilt_at, self._stale = state.now, False
        plan = state.plan
        if plan is not self._plan_seen:
            self._plan_seen, self._clustered_on, self._clustered_at = plan, None, -math.inf
            self._remaining = {op: len(plan.upstream_path(op)) for op in plan.names}
            self._units = {op: Unit("operator", (op,)) for op in plan.names}
        last, now = self._clustered_on, state.now
        first = last is None or not self._clusters
        if first or now - self._clustered_at >= self.recluster_period:
            features = np.asarray(operator_features(plan, state.selectivity, state.cost), dtype=np.float64)
            if first or float(np.max(np.abs(features - last))) > self.recluster_tolerance:
                labels = s_means([tuple(f) for f in features.tolist()], self.T, self.width)
                self._clustered_on, self._clustered_at = features, now
                groups: dict[int, list[str]] = {}
                for op, lab in zip(plan.names, labels):
                    groups.setdefault(lab, []).append(op)
                self._clusters = [tuple(groups[k]) for k in sorted(groups)]
                self._cluster_of = {op: k for k, ops in enumerate(self._clusters) for op in ops}
        prio = Chain().priorities(state)
        index = plan.index
        remaining = self._remaining
        oldest = state.oldest
        key = lambda op: (-prio[op], oldest(op), remaining[op], index[op])  # noqa: E731
        self._heaps = [LazyHeap(key, state.runnable) for _ in self._clusters]
        self._cursor %= len(self._clusters)
        for op in state.runnable_operators():
            self._heaps[self._cluster_of[op]].push(op)

    def _on_enqueue(self, op: str, state: SchedulerState) -> None:
        self._heaps[self._cluster_of[op]].ensure(op)

    def _choose(self, state: SchedulerState) -> Unit | None:
        n = len(self._heaps)
        for step in range(n):
            k = (self._cursor + step) % n
            op = self._heaps[k].top()
            if op is not None:
                self._cursor = (k + 1) % n
                return self._units[op]
        return None

    @property
    def clusters(self) -> list[tuple[str, ...]]:
        """Operators of each cluster, in plan order (empty until attached)."""
        return list(self._clusters)

    def pick_cluster(self, cluster: int, state: SchedulerState) -> Unit | None:
        """The next unit of cluster ``cluster`` alone (its own Chain order), or None when none of
        its operators can run. Not thread-safe: an executor running clusters in threads must
        serialise calls to :meth:`pick` / :meth:`pick_cluster` (they update shared heaps)."""
        self._catch_up(state)
        if not 0 <= cluster < len(self._heaps):
            raise SchedulerError(f"Cos: no cluster {cluster!r}; there are {len(self._heaps)} clusters")
        op = self._heaps[cluster].top()
        return None if op is None else self._units[op]

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self._cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        unknown = set(state) - {"cursor"}
        if unknown:
            raise SchedulerError(f"Cos state has unknown keys {sorted(unknown)}; expected ['cursor']")
        self._cursor = check_number(
            "cursor", state.get("cursor", 0), low=0, integer=True, error=SchedulerError, where="Cos state: "
        )
        if self._heaps:
            self._cursor %= len(self._heaps)
