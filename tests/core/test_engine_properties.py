"""Property tests of the whole decision: for any pods and stats, critical pods are never chosen, the
ranking is a permutation of the active pods, and at most one pod goes per threshold-driven cycle; the candidates
the Eviction API may be asked for after it are the next non-critical pods in ranking order."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from evictd.commands.simulate import parse_scenario
from evictd.core.engine import EngineConfig, EngineState, ReclaimThenEvict, assess, choose_eviction, layout_of
from evictd.core.errors import ConfigError
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import is_critical_pod
from evictd.core.summary_parser import summary_from_dict

SIGNALS = ["memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
           "imagefs.inodesFree", "pid.available"]


@st.composite
def pod_and_stats(draw: st.DrawFn, index: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    annotations = draw(st.sampled_from([{}, {"kubernetes.io/config.source": "file"},
                                        {"kubernetes.io/config.mirror": "x"}, {"kubernetes.io/config.source": "api"}]))
    priority = draw(st.one_of(st.none(), st.integers(-10, 10), st.just(2_000_000_000), st.just(2_000_001_000)))
    requests = {k: f"{draw(st.integers(0, 4096))}Mi" for k in draw(st.sets(st.sampled_from(["memory", "ephemeral-storage"])))}
    name = f"pod-{index}"
    pod: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{index}",
                                        "annotations": annotations},
                           "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
                           "status": {"phase": "Running"}}
    if priority is not None:
        pod["spec"]["priority"] = priority
    if not draw(st.booleans()):
        return pod, None
    mib = st.integers(0, 8192).map(lambda m: m << 20)
    stats = {"podRef": {"name": name, "namespace": "ns", "uid": f"uid-{index}"},
             "memory": {"workingSetBytes": draw(mib)},
             "containers": [{"name": "c", "memory": {"workingSetBytes": draw(mib)},
                             "rootfs": {"usedBytes": draw(mib), "inodesUsed": draw(st.integers(0, 10**6))},
                             "logs": {"usedBytes": draw(mib), "inodesUsed": draw(st.integers(0, 1000))}}],
             "process_stats": {"process_count": draw(st.integers(0, 5000))}}
    return pod, stats


@st.composite
def nodes(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    count = draw(st.integers(0, 12))
    pairs = [draw(pod_and_stats(i)) for i in range(count)]
    return [p for p, _ in pairs], [s for _, s in pairs if s is not None]


@settings(max_examples=150, deadline=None)
@given(nodes(), st.sampled_from(SIGNALS), st.booleans(), st.booleans(), st.integers(1, 4))
def test_critical_pods_are_never_chosen(node: tuple[list[dict[str, Any]], list[dict[str, Any]]], signal: str,
                                        imagefs: bool, split: bool, wanted: int) -> None:
    pod_docs, stats = node
    pods = [pod_from_dict(p) for p in pod_docs]
    starved = {"availableBytes": 0, "capacityBytes": 100 << 30, "inodesFree": 0, "inodes": 10**6}
    summary = summary_from_dict({"node": {"memory": {"availableBytes": 0, "workingSetBytes": 1 << 34},
                                          "fs": starved, "runtime": {"imageFs": starved},
                                          "rlimit": {"maxpid": 1000, "curproc": 1000}},
                                 "pods": stats})
    config = EngineConfig.from_settings(EvictionSettings(hard={signal: "1"}, local_storage_capacity_isolation=False))
    layout = FsLayout(dedicated_imagefs=imagefs, split_containerfs=split and imagefs)
    state, assessment = assess(EngineState(), config, layout, summary, pods, now=0.0)
    step = assessment.next_step
    assert isinstance(step, ReclaimThenEvict)
    choice = choose_eviction(config, layout_of(state), step, assessment.observations, pods, summary)
    assert sorted(p.key for p in choice.ranking) == sorted(p.key for p in pods)
    candidates = [p for p in choice.ranking if not is_critical_pod(p)]
    if candidates:
        assert choice.eviction is not None
        assert choice.eviction.pod == candidates[0]
        assert not is_critical_pod(choice.eviction.pod)
    else:
        assert choice.eviction is None
    assert choice.alternates == ()
    # Asking for more candidates changes nothing of the decision, and adds the next non-critical pods in order.
    more = choose_eviction(config, layout_of(state), step, assessment.observations, pods, summary, candidates=wanted)
    assert (more.ranking, more.eviction, more.skipped_critical) == (choice.ranking, choice.eviction,
                                                                    choice.skipped_critical)
    assert [e.pod for e in more.alternates] == candidates[1:wanted]


scenario_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["config", "layout", "pods", "steps", "at", "summary", "afterReclaim", "node", "memory",
                         "availableBytes", "workingSetBytes", "metadata", "name", "spec", "containers",
                         "evictionHard", "memory.available", "podRef", "x-y"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(scenario_values)
def test_scenario_parser_raises_only_config_errors(document: object) -> None:
    with contextlib.suppress(ConfigError):  # any other exception fails the test
        parse_scenario(document)
