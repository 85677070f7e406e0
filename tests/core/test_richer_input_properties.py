"""Property tests on the richer inputs of issue #10, each against an independent oracle written here from
KUBELET_SPEC.md: pod requests with sidecars, init containers, overhead and pod-level resources (upstream's
resource helpers); the memory ranking of 13+ pods with many ties (upstream's comparators, then evictd's
documented tie-break: the pod source's order); soft thresholds whose stats timestamps go backwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import Gi, Mi, container, core_pod, fs, pod, pod_stats, stamp, summary
from cycle_reports import simulate_steps
from evictd.core.engine import (
    Assessment,
    EngineConfig,
    EngineState,
    EvictForLocalStorage,
    EvictionChoice,
    ReclaimThenEvict,
    assess,
    choose_eviction,
    layout_of,
)
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.resources import pod_request
from evictd.core.summary import Summary
from evictd.core.summary_parser import summary_from_dict

# --- pod requests: KEP-753 sidecars and init containers, overhead, pod-level resources -------------------

mib = st.integers(0, 64)
maybe_mib = st.none() | mib


@st.composite
def resourced_pods(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod JSON and the plain-int description (MiB) the oracle works from."""
    regular = draw(st.lists(maybe_mib, min_size=1, max_size=3))
    init = draw(st.lists(st.tuples(maybe_mib, st.booleans()), max_size=4))  # (request, is sidecar)
    overhead = draw(maybe_mib)
    pod_level = draw(maybe_mib)

    def requests(value: int | None) -> dict[str, str] | None:
        return None if value is None else {"memory": f"{value}Mi", "ephemeral-storage": f"{value}Mi"}

    containers = [container(f"c{i}", requests(v)) for i, v in enumerate(regular)]
    inits = [container(f"i{i}", requests(v), sidecar=s) for i, (v, s) in enumerate(init)]
    doc = pod("p", containers=containers, init_containers=inits,
              overhead=None if overhead is None else {"memory": f"{overhead}Mi", "ephemeral-storage": f"{overhead}Mi"},
              pod_resources=None if pod_level is None else {"requests": {"memory": f"{pod_level}Mi"}})
    plain = {"regular": regular, "init": init, "overhead": overhead, "pod_level": pod_level}
    return doc, plain


def oracle_request_mib(plain: dict[str, Any], resource: str) -> int:
    """GetResourceRequestQuantity as KUBELET_SPEC §7 states it, in MiB.

    Containers' requests: the sum of regular containers and sidecars, or the peak of any init container
    (its request plus the sidecars started before it) when larger. Pod-level resources (memory here) replace
    the containers' figure for memory and make ephemeral-storage zero. Overhead is added to a non-zero total.
    """
    if plain["pod_level"] is not None:
        total = plain["pod_level"] if resource == "memory" else 0
    else:
        made = [v for v in plain["regular"] if v is not None] + [v for v, _ in plain["init"] if v is not None]
        sidecars = 0
        peak = 0
        for value, is_sidecar in plain["init"]:
            if is_sidecar:
                sidecars += value or 0
            else:
                peak = max(peak, sidecars + (value or 0))
        total = max(sum(v or 0 for v in plain["regular"]) + sidecars, peak) if made else 0
    if total and plain["overhead"] is not None:
        total += plain["overhead"]
    return total


@settings(max_examples=300, deadline=None)
@given(resourced_pods())
def test_pod_request_matches_upstream_resource_helpers(drawn: tuple[dict[str, Any], dict[str, Any]]) -> None:
    doc, plain = drawn
    parsed = pod_from_dict(doc)
    for resource in ("memory", "ephemeral-storage"):
        assert pod_request(parsed, resource).value == oracle_request_mib(plain, resource) * Mi, resource


def test_pod_request_sidecar_started_before_a_large_init_container_counts_in_its_peak() -> None:
    # One worked example of the oracle: sidecar 10 + init 50 = 60 > regular 20 + sidecar 10 = 30; +5 overhead.
    p = core_pod(containers=[container("c", {"memory": "20Mi"})],
                 init_containers=[container("s", {"memory": "10Mi"}, sidecar=True), container("i", {"memory": "50Mi"})],
                 overhead={"memory": "5Mi"})
    assert pod_request(p, "memory").value == 65 * Mi


# --- memory ranking of 13+ pods with ties -----------------------------------------------------------------

Cmp = Callable[[Any, Any], int]


def _cmp_bool(a: bool, b: bool) -> int:
    """Upstream cmpBool: true first."""
    return 0 if a == b else (-1 if a else 1)


def _oracle_memory_ranking(entries: list[dict[str, Any]]) -> list[str]:
    """Upstream's multiSorter (exceedMemoryRequests, priority, memory) as pairwise comparators, then the
    pod source's order for pods tied in all three (evictd's documented choice; Python's sort is stable)."""

    def exceed(a: dict[str, Any], b: dict[str, Any]) -> int:
        if a["usage"] is None or b["usage"] is None:
            return _cmp_bool(a["usage"] is None, b["usage"] is None)
        return _cmp_bool(a["usage"] > a["request"], b["usage"] > b["request"])

    def priority(a: dict[str, Any], b: dict[str, Any]) -> int:
        return (a["priority"] > b["priority"]) - (a["priority"] < b["priority"])

    def memory(a: dict[str, Any], b: dict[str, Any]) -> int:
        if a["usage"] is None or b["usage"] is None:
            return _cmp_bool(a["usage"] is None, b["usage"] is None)
        above_a, above_b = a["usage"] - a["request"], b["usage"] - b["request"]
        return (above_b > above_a) - (above_b < above_a)

    def chained(a: dict[str, Any], b: dict[str, Any]) -> int:
        for cmp in (exceed, priority, memory):
            result = cmp(a, b)
            if result:
                return result
        return 0

    return [e["name"] for e in sorted(entries, key=functools.cmp_to_key(chained))]


@st.composite
def tied_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    """13 to 20 pods drawn from a tiny value space, so most of them tie with another in every key."""
    count = draw(st.integers(13, 20))
    return [
        {"name": f"p{i:02d}", "priority": draw(st.sampled_from([0, 0, 100])),
         "request": draw(st.sampled_from([0, 64])), "usage": draw(st.sampled_from([None, 64, 128, 128]))}
        for i in range(count)
    ]


def _choose(config: EngineConfig, state: EngineState, assessment: Assessment, pods: Sequence[Pod],
            starved: Summary) -> EvictionChoice:
    """choose_eviction for an assessment that must reclaim then evict."""
    step = assessment.next_step
    assert isinstance(step, ReclaimThenEvict)
    return choose_eviction(config, layout_of(state), step, assessment.observations, pods, starved)


def _memory_choice(entries: list[dict[str, Any]]) -> tuple[list[str], str | None]:
    docs = [pod(e["name"], priority=e["priority"], requests={"memory": f"{e['request']}Mi"} if e["request"] else None)
            for e in entries]
    stats = [pod_stats(d, memory=e["usage"] * Mi) for d, e in zip(docs, entries, strict=True) if e["usage"] is not None]
    pods = [pod_from_dict(d) for d in docs]
    starved = summary_from_dict(summary(memory=0, pods=stats))
    config = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"},
                                                         local_storage_capacity_isolation=False))
    state, assessment = assess(EngineState(), config, FsLayout(), starved, pods, now=0.0)
    choice = _choose(config, state, assessment, pods, starved)
    evicted = choice.eviction.pod.name if choice.eviction is not None else None
    return [p.name for p in choice.ranking], evicted


@settings(max_examples=200, deadline=None)
@given(tied_pods(), st.randoms(use_true_random=False))
def test_ranking_of_13_or_more_tied_pods_is_upstreams_order_then_source_order(
    entries: list[dict[str, Any]], rng: Any
) -> None:
    ranking, evicted = _memory_choice(entries)
    assert ranking == _oracle_memory_ranking(entries)
    assert evicted == ranking[0]
    # Any other source order: the same pods in the same key order, ties now in the new source order.
    shuffled = list(entries)
    rng.shuffle(shuffled)
    reranked, _ = _memory_choice(shuffled)
    assert reranked == _oracle_memory_ranking(shuffled)
    keys = {e["name"]: (e["priority"],) if e["usage"] is None
            else (e["usage"] > e["request"], e["priority"], e["usage"] - e["request"]) for e in entries}
    assert [keys[n] for n in reranked] == [keys[n] for n in ranking]


# --- soft thresholds with stats timestamps going backwards -------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    grace_s=st.sampled_from([0, 1, 5, 30]),
    max_pod_grace_s=st.sampled_from([0, 1, 10, 60]),
    pod_grace_s=st.sampled_from([None, 0, 5, 30, 120]),
    steps=st.lists(st.tuples(st.integers(1, 20), st.integers(0, 59), st.booleans()), min_size=1, max_size=8),
)
def test_soft_threshold_grace_counts_in_evictds_own_time_whatever_the_stats_timestamps(
    grace_s: int, max_pod_grace_s: int, pod_grace_s: int | None, steps: list[tuple[int, int, bool]]
) -> None:
    """Each step: the monotonic clock advances, the stats carry any timestamp (often backwards), and memory
    is short or not. The threshold acts only when it has been met without a break for its grace period by
    evictd's clock, and on stats newer than the last cycle's; the pod gets min(maxPodGracePeriod, its own)."""
    doc = pod("victim", grace=pod_grace_s)
    pods = [pod_from_dict(doc)]
    config = EngineConfig.from_settings(EvictionSettings(
        hard={}, soft={"memory.available": "1Gi"}, soft_grace_period={"memory.available": f"{grace_s}s"},
        max_pod_grace_period_s=max_pod_grace_s, local_storage_capacity_isolation=False))
    state = EngineState()
    now = 0.0
    met_since: float | None = None
    last_stamp: int | None = None
    for advance, second, short in steps:
        now += advance
        stamp = f"2026-11-21T10:00:{second:02d}Z"
        doc_summary = summary(memory=(0 if short else 4096) * Mi, time=stamp,
                              pods=[pod_stats(doc, memory=64 * Mi)])
        parsed = summary_from_dict(doc_summary)
        state, assessment = assess(state, config, FsLayout(), parsed, pods, now=now)
        met_since = (met_since if met_since is not None else now) if short else None
        newer = last_stamp is None or second > last_stamp
        last_stamp = second
        acts = isinstance(assessment.next_step, ReclaimThenEvict)
        assert acts == (met_since is not None and now - met_since >= grace_s and newer)
        if acts:
            choice = _choose(config, state, assessment, pods, parsed)
            assert choice.eviction is not None
            # Upstream: a soft threshold with a 0 s grace period is hard (isHardEvictionThreshold): 1 s. Else the
            # override is evictionMaxPodGracePeriod, lowered to the pod's own grace period when the pod has one;
            # the pod worker then turns anything below 1 s into 1 s (KUBELET_SPEC §10.2).
            if grace_s == 0:
                expected = 1
            else:
                expected = max_pod_grace_s if pod_grace_s is None else min(max_pod_grace_s, pod_grace_s)
            assert choice.eviction.grace_period_override_s == expected
            assert choice.eviction.effective_grace_period_s == max(expected, 1)


# --- disk ranking in all three filesystem layouts -------------------------------------------------------------

# KUBELET_SPEC §9.4: which parts of a pod's usage each disk signal measures, per layout. images adds nothing.
LAYOUTS = {
    "single": (FsLayout(), {"nodefs.available": {"root", "logs", "volume"},
                            "imagefs.available": {"root", "logs", "volume"}}),
    "imagefs": (FsLayout(dedicated_imagefs=True), {"nodefs.available": {"logs", "volume"},
                                                   "imagefs.available": {"root"}}),
    "split": (FsLayout(dedicated_imagefs=True, split_containerfs=True),
              {"nodefs.available": {"root", "logs", "volume"}, "imagefs.available": set()}),
}


@st.composite
def disk_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 15))
    usage = st.sampled_from([0, 1, 2, 3])  # MiB, few values: ties across parts and pods
    return [{"name": f"p{i:02d}", "root": draw(usage), "logs": draw(usage), "volume": draw(usage),
             "memory_volume": draw(usage), "request": draw(st.sampled_from([0, 2]))} for i in range(count)]


@settings(max_examples=200, deadline=None)
@given(disk_pods(), st.sampled_from(sorted(LAYOUTS)), st.sampled_from(["nodefs.available", "imagefs.available"]))
def test_disk_ranking_measures_the_parts_of_each_layout(entries: list[dict[str, Any]], layout_name: str,
                                                        signal: str) -> None:
    """Same priority for all: pods whose measured usage exceeds their ephemeral-storage request first, then the
    largest usage above request, ties in source order. A memory-medium emptyDir never counts."""
    layout, measured = LAYOUTS[layout_name]
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}]
    docs = [pod(e["name"], volumes=volumes,
                requests={"ephemeral-storage": f"{e['request']}Mi"} if e["request"] else None) for e in entries]
    stats = [pod_stats(d, rootfs=e["root"] * Mi, logs=e["logs"] * Mi,
                       volumes={"scratch": e["volume"] * Mi, "shm": e["memory_volume"] * Mi})
             for d, e in zip(docs, entries, strict=True)]
    pods = [pod_from_dict(d) for d in docs]
    starved = summary_from_dict(summary(nodefs=fs(0, 100 * Gi), imagefs=fs(0, 100 * Gi), pods=stats))
    config = EngineConfig.from_settings(EvictionSettings(hard={signal: "1Gi"}, local_storage_capacity_isolation=False))
    state, assessment = assess(EngineState(), config, layout, starved, pods, now=0.0)
    choice = _choose(config, state, assessment, pods, starved)

    def key(e: dict[str, Any]) -> tuple[bool, int]:
        used = sum(e[part] for part in measured[signal])
        return used <= e["request"], -(used - e["request"])

    assert [p.name for p in choice.ranking] == [e["name"] for e in sorted(entries, key=key)]


# --- node-level reclaim (container and image GC) before any eviction, per layout --------------------------------

# KUBELET_SPEC §8: the reclaim functions each disk signal runs, per layout.
RECLAIM = {
    "single": {"nodefs.available": ["containerGC", "imageGC"], "imagefs.available": ["containerGC", "imageGC"]},
    "imagefs": {"nodefs.available": [], "imagefs.available": ["containerGC", "imageGC"]},
    "split": {"nodefs.available": ["containerGC"], "imagefs.available": ["imageGC"]},
}
LAYOUT_DOCS = {"single": {}, "imagefs": {"dedicatedImageFs": True},
               "split": {"dedicatedImageFs": True, "splitContainerFs": True}}


@settings(max_examples=150, deadline=None)
@given(layout_name=st.sampled_from(sorted(RECLAIM)), signal=st.sampled_from(["nodefs.available", "imagefs.available"]),
       threshold_mib=st.integers(1, 64), min_reclaim_mib=st.none() | st.integers(0, 64),
       freed_to_mib=st.integers(0, 200), soft=st.booleans())
def test_reclaim_that_frees_enough_means_no_pod_eviction(layout_name: str, signal: str, threshold_mib: int,
                                                        min_reclaim_mib: int | None, freed_to_mib: int,
                                                        soft: bool) -> None:
    """Under a met disk threshold the layout's GC functions run first; when they leave no configured threshold
    (soft ones too, grace ignored) met with its minimum reclaim, nobody is evicted; otherwise (or when the
    layout has no GC for the signal) the ranking's first pod is."""
    config: dict[str, Any] = {"evictionHard": {signal: f"{threshold_mib}Mi"}}
    if soft:  # a soft threshold that never acts (long grace) still counts in the post-reclaim check
        config["evictionSoft"] = {signal: f"{2 * threshold_mib}Mi"}
        config["evictionSoftGracePeriod"] = {signal: "1h"}
    if min_reclaim_mib is not None:
        config["evictionMinimumReclaim"] = {signal: f"{min_reclaim_mib}Mi"}
    hog = pod("hog")
    before = summary(nodefs=fs(0, 100 * Gi), imagefs=fs(0, 100 * Gi), pods=[pod_stats(hog, rootfs=Mi, logs=Mi)])
    after = summary(nodefs=fs(freed_to_mib * Mi, 100 * Gi), imagefs=fs(freed_to_mib * Mi, 100 * Gi),
                    pods=[pod_stats(hog, rootfs=Mi, logs=Mi)])
    (step,) = simulate_steps({"config": config, "layout": LAYOUT_DOCS[layout_name], "pods": [hog],
                              "steps": [{"at": 0, "summary": before, "afterReclaim": after}]})
    actions = RECLAIM[layout_name][signal]
    needed = [threshold_mib + (min_reclaim_mib or 0)]
    if soft:
        needed.append(2 * threshold_mib + (min_reclaim_mib or 0))
    freed_enough = bool(actions) and all(freed_to_mib >= n for n in needed)
    assert step["reclaim"] == actions
    assert [e["name"] for e in step["evicted"]] == ([] if freed_enough else ["hog"])


# --- local-storage limit evictions ------------------------------------------------------------------------------


@st.composite
def limited_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    small = st.integers(0, 8)  # MiB
    return [{"name": f"p{i:02d}", "size_limit": draw(st.none() | small), "limit": draw(st.none() | small),
             "volume": draw(small), "ephemeral": draw(small), "rootfs": draw(small), "logs": draw(small),
             "has_stats": draw(st.booleans() | st.just(True)),
             "critical": draw(st.sampled_from([None, "static", "priority"]))}
            for i in range(draw(st.integers(1, 14)))]


def _oracle_local_storage(e: dict[str, Any], dedicated_imagefs: bool) -> str | None:
    """KUBELET_SPEC §12: the first rule that fires, or None."""
    if not e["has_stats"] or e["critical"]:
        return None
    if e["size_limit"] and e["volume"] > e["size_limit"]:
        return "emptydirfs.limit"
    if e["limit"] is not None and e["ephemeral"] > e["limit"]:
        return "ephemeralpodfs.limit"
    container_usage = e["logs"] + (0 if dedicated_imagefs else e["rootfs"])
    if e["limit"] and container_usage > e["limit"]:
        return "ephemeralcontainerfs.limit"
    return None


@settings(max_examples=200, deadline=None)
@given(limited_pods(), st.booleans())
def test_local_storage_limit_evictions_follow_the_kubelets_three_rules(entries: list[dict[str, Any]],
                                                                      dedicated_imagefs: bool) -> None:
    docs = []
    for e in entries:
        volume: dict[str, Any] = {"name": "scratch", "emptyDir": {}}
        if e["size_limit"] is not None:
            volume["emptyDir"]["sizeLimit"] = f"{e['size_limit']}Mi"
        docs.append(pod(
            e["name"], volumes=[volume],
            limits={"ephemeral-storage": f"{e['limit']}Mi"} if e["limit"] is not None else None,
            annotations={"kubernetes.io/config.source": "file"} if e["critical"] == "static" else None,
            priority=2_000_000_000 if e["critical"] == "priority" else None))
    stats = [pod_stats(d, rootfs=e["rootfs"] * Mi, logs=e["logs"] * Mi, volumes={"scratch": e["volume"] * Mi},
                       ephemeral=e["ephemeral"] * Mi)
             for d, e in zip(docs, entries, strict=True) if e["has_stats"]]
    pods = [pod_from_dict(d) for d in docs]
    layout = FsLayout(dedicated_imagefs=dedicated_imagefs)
    config = EngineConfig.from_settings(EvictionSettings(hard={}, local_storage_capacity_isolation=True))
    _, assessment = assess(EngineState(), config, layout, summary_from_dict(summary(pods=stats)), pods, now=0.0)
    expected = [(e["name"], label) for e in entries
                if (label := _oracle_local_storage(e, dedicated_imagefs)) is not None]
    step = assessment.next_step
    evictions = step.evictions if isinstance(step, EvictForLocalStorage) else ()
    assert isinstance(step, EvictForLocalStorage) == bool(expected)
    assert [(ev.pod.name, ev.signal) for ev in evictions] == expected
    assert all(ev.grace_period_override_s == 1 and not ev.conditions for ev in evictions)


# --- several thresholds actionable in one cycle; observedGeneration ------------------------------------------

SIGNALS_IN_CLASS = {"memory.available": 0, "nodefs.available": 1, "pid.available": 1}


@settings(max_examples=150, deadline=None)
@given(hard=st.sets(st.sampled_from(sorted(SIGNALS_IN_CLASS))), soft=st.sets(st.sampled_from(sorted(SIGNALS_IN_CLASS))),
       generation=st.integers(1, 10**6))
def test_several_actionable_thresholds_act_on_memory_first_then_hard_before_soft(
    hard: set[str], soft: set[str], generation: int
) -> None:
    """Where the kubelet's choice follows Go map order, evictd's is fixed (docs/kubelet-differences.md): memory before other signals,
    then hard before soft. The DisruptionTarget condition carries the pod's metadata.generation."""
    victim = pod("victim", generation=generation, grace=60)
    config = EngineConfig.from_settings(EvictionSettings(
        hard={s: "1Mi" for s in hard}, soft={s: "2Mi" for s in soft},
        soft_grace_period={s: "10s" for s in soft}, max_pod_grace_period_s=30, local_storage_capacity_isolation=False))
    pods = [pod_from_dict(victim)]
    state = EngineState()
    for now, second in ((0.0, 0), (100.0, 5)):  # the second cycle: every soft grace period has passed
        starved = summary_from_dict(summary(memory=0, nodefs=fs(0, 100 * Gi), pids=(1000, 1000), time=stamp(second),
                                            pods=[pod_stats(victim, memory=Mi, rootfs=Mi, processes=1)]))
        state, assessment = assess(state, config, FsLayout(), starved, pods, now=now)
    actionable = [(SIGNALS_IN_CLASS[s], 0, s) for s in hard] + [(SIGNALS_IN_CLASS[s], 1, s) for s in soft]
    if not actionable:
        assert not isinstance(assessment.next_step, ReclaimThenEvict)
        return
    signal_class, softness, _ = min(actionable, key=lambda item: item[:2])
    assert isinstance(assessment.next_step, ReclaimThenEvict)
    target = assessment.next_step.threshold
    # Between nodefs and pid (same class) evictd keeps configuration order; only the class and hardness are fixed.
    assert (SIGNALS_IN_CLASS[str(target.signal)], target.is_hard) == (signal_class, softness == 0)
    assert (str(target.signal), softness) in {(s, soft) for _, soft, s in actionable}
    choice = _choose(config, state, assessment, pods, starved)
    assert choice.eviction is not None
    assert choice.eviction.grace_period_override_s == (1 if softness == 0 else 30)
    (condition,) = choice.eviction.conditions
    assert (condition.type, condition.observed_generation) == ("DisruptionTarget", generation)
