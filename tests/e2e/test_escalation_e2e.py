"""End to end: a hard threshold cuts short the soft eviction of a pod that ignores SIGTERM (issue #43 item 4).

The node of test_memory_eviction_e2e.py: the session's containerd with its pods cgroup limited to 400 MiB, the
test API server, the kubelet stand-in (which honours a DELETE that shortens the grace period of a pod already
terminating, as the real kubelet's pod workers do) and a real `evictd run` with a soft
``allocatableMemory.available<250Mi`` (grace 2 s) and a hard ``allocatableMemory.available<120Mi``;
``evictionMaxPodGracePeriod`` and the holder's ``terminationGracePeriodSeconds`` are 600 s.

The story: the holder, a container that ignores SIGTERM, fills 200 MiB (soft pressure). After the soft grace
period evictd deletes it with 600 s; the stand-in sends SIGTERM, which it ignores: it keeps running and keeps its
memory, and evictd waits for it to go. The holder then fills 120 MiB more (hard pressure, the test's clock
starting as it is told to): evictd cuts its wait short and deletes the holder again with the hard grace period
(1 s) within `ESCALATION_WITHIN_S`, before ranking any other pod, as a follow-up of its one eviction (one
"evicting pod", one Evicted event); the stand-in stops it again with 2 s (the
kubelet's minimum) and the runtime kills it. The bystander is never deleted.
"""

from __future__ import annotations

import time
from pathlib import Path

from e2e_node import TRIGGER_MOUNT, ClusterNode, Container, MiB, Trigger, pods_memory_limit

from evictd.core.runtime import ContainerState
from evictd.observe.cycle_logging import FOLLOW_UP_EVENT
from polling import wait_until

PODS_LIMIT_BYTES = 400 * MiB
SIGNAL = "allocatableMemory.available"
SOFT, HARD = "250Mi", "120Mi"
SOFT_GRACE_S = 2
LONG_GRACE_S = 600  # evictionMaxPodGracePeriod and the holder's terminationGracePeriodSeconds
HARD_GRACE_PERIOD_S = 1  # the kubelet's immediateEvictionGracePeriodSeconds
KUBELET = (f"evictionSoft: {{{SIGNAL}: {SOFT}}}\nevictionSoftGracePeriod: {{{SIGNAL}: {SOFT_GRACE_S}s}}\n"
           f"evictionHard: {{{SIGNAL}: {HARD}}}\nevictionMaxPodGracePeriod: {LONG_GRACE_S}\n")
# Issue #43's bound: the re-delete within 3 s of the hard crossing (the memcg notification ends the wait at once).
ESCALATION_WITHIN_S = 3.0
# The holder: ignores SIGTERM (sh as PID 1 and its children inherit the ignored signal); fills 200 MiB once
# /trigger/go exists, 120 MiB more once /trigger/more exists, and holds both.
HOLDER_SCRIPT = (
    f'trap "" TERM; echo ready; while [ ! -e {TRIGGER_MOUNT}/go ]; do sleep 0.05; done; '
    "(dd if=/dev/zero bs=200M count=1 2>/dev/null | sleep 2147483647) & "
    f"while [ ! -e {TRIGGER_MOUNT}/more ]; do sleep 0.05; done; "
    "(dd if=/dev/zero bs=120M count=1 2>/dev/null | sleep 2147483647) & wait"
)



def test_a_hard_threshold_deletes_the_soft_evicted_pod_again_at_once_and_no_bystander(
    node: ClusterNode, tmp_path: Path,
) -> None:
    trigger = Trigger(tmp_path / "trigger")
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(KUBELET)
        daemon.wait_event("evictd started")
        bystander = node.run_pod("quiet", [Container("app", requests={"memory": "64Mi"})])
        holder = node.run_pod("holder", [Container("hog", HOLDER_SCRIPT, requests={"memory": "32Mi"},
                                                   options=trigger.mount())], grace_period_s=LONG_GRACE_S)
        key = f"{holder.namespace}/{holder.name}"
        [holder_container] = holder.container_ids.values()
        daemon.wait_for_cycles(2)

        trigger.pull()  # 200 MiB: soft pressure; after its 2 s grace period, the DELETE with 600 s
        soft = daemon.wait_event("evicting pod", timeout=20, pod=key)
        assert soft["grace_period_seconds"] == LONG_GRACE_S and soft["threshold"].endswith(f"(soft, grace {SOFT_GRACE_S}s)")
        assert soft["ranking"][0] == key
        wait_until(lambda: node.requests_to("DELETE", holder), 10, "the soft DELETE of the holder")
        daemon.wait_event("waiting for evicted pods to go", timeout=10, pods=[key])
        time.sleep(1.0)  # the stand-in's SIGTERM went out: ignored, the holder runs on with its memory
        assert node.runtime.cri.container_status(holder_container).state is ContainerState.RUNNING

        (trigger.folder / "more").write_text("more\n")  # 120 MiB more: the hard threshold
        more_at = time.monotonic()
        more_at_wall = time.time()
        wait_until(lambda: len(node.requests_to("DELETE", holder)) >= 2, ESCALATION_WITHIN_S + 10,
                   "the holder's second DELETE", interval_s=0.02)
        redeleted_after_s = time.monotonic() - more_at
        hard = daemon.wait_event(FOLLOW_UP_EVENT, timeout=5, pod=key, grace_period_seconds=HARD_GRACE_PERIOD_S)
        assert hard["kind"] == "escalated"  # a follow-up of the soft eviction, not a second eviction (issue #73)
        crossed = daemon.wait_for(lambda e: e.get("event") == "threshold met"
                                  and e.get("threshold") == f"{SIGNAL}<{HARD} (hard)", timeout=5)
        cut = daemon.wait_event("wait for evicted pods cut short: a hard threshold is met", timeout=5)
        logged_after_s = hard["_received"] - more_at_wall
        print(f"hard allocation -> second DELETE {redeleted_after_s:.3f} s (test's poll), -> follow-up "
              f"{logged_after_s:.3f} s (received), 'threshold met' at {crossed['_received'] - more_at_wall:.3f} s, "
              f"wait cut short at {cut['_received'] - more_at_wall:.3f} s")
        assert redeleted_after_s < ESCALATION_WITHIN_S, f"re-deleted {redeleted_after_s:.2f} s after the crossing"
        assert hard["ranking"][0] == key and hard["threshold"] == f"{SIGNAL}<{HARD} (hard)"

        # The stand-in stops it again with the kubelet's minimum 2 s: the runtime SIGKILLs it, the object goes.
        node.wait_gone(holder, timeout_s=15)
        assert node.kubelet.stopped_sooner == [((holder.namespace, holder.name), 2)]
        deletes = node.deletes()
        assert [(r.path.rsplit("/", 1)[1], r.body["gracePeriodSeconds"], r.status) for r in deletes] == [
            ("holder", LONG_GRACE_S, 200), ("holder", HARD_GRACE_PERIOD_S, 200)]  # the stand-in's own is not HTTP
        versions = [obj["metadata"].get("deletionGracePeriodSeconds")
                    for _, obj in node.apiserver.store.pod_versions(holder.namespace, holder.name)
                    if obj["metadata"]["uid"] == holder.uid and obj["metadata"].get("deletionTimestamp")]
        assert versions[0] == LONG_GRACE_S and HARD_GRACE_PERIOD_S in versions and versions[-1] == 0

        time.sleep(2.0)  # the pressure went with the holder: nothing else is evicted
        assert [r for r in node.deletes() if "/pods/quiet" in r.path] == []
        assert [e["pod"] for e in daemon.events if e.get("event") == "evicting pod"] == [key]  # evicted once
        assert [e["involvedObject"]["name"] for e in node.apiserver.store.events(holder.namespace)
                if e["reason"] == "Evicted"] == ["holder"]
        quiet = node.apiserver.store.get_pod(bystander.namespace, bystander.name)
        assert quiet is not None and "deletionTimestamp" not in quiet["metadata"]
        assert daemon.stop() == 0
