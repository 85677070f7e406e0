"""Reclaim for the daemons on a real cgroup v2 kernel (the user-mode Linux guest of tests/uml, Debian's 6.1, no PSI).

One guest boot runs tests/uml/guest_daemons_reclaim.py with this checkout's ``src`` first on the path; this asserts on
the JSON it wrote: a daemon in system.slice whose pages a BestEffort pod's stream pushed out re-reads them, the
kernel counts it, and evictd's figure says so; the rule then asks the BestEffort tier for the daemons' memory, and
``memory.reclaim`` drops that much of the stream's page cache (inactive: the tier's usage falls, its working set
need not) without touching the daemons' cache. Quiet daemons make the rule skip. Then evictd's memory.low on
system.slice (`daemonsMemoryLow`): kept, written again after a reset, left to an operator, taken back in dry-run and at
stop; with it the same stream leaves the daemon's cache in place, without it the stream pushes it out; and when the
kernel has nothing else left it takes the protected pages too, counts it (``low``, ``pgsteal``), and the daemons'
figure counts what it took; before that, as a pod allocates, MemAvailable stops covering the daemon's protected page
cache while the kernel has not yet reclaimed below memory.low. Fails, never skips, when the guest kernel is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from uml_guest import boot_guest

from evictd.core.daemons_reclaim import TRIGGER_BASIS_POINTS

MiB = 1 << 20
GUEST = 'PYTHONPATH="$EVICTD_REPO/src:$EVICTD_REPO/tests/uml" "$EVICTD_PYTHON" ' \
        '"$EVICTD_REPO/tests/uml/guest_daemons_reclaim.py" > "$UML_OUT/daemons-reclaim.log" 2>&1\n'
# The guest's memory, under the backup's 384 MiB stream; its own disk holds both files (hostfs leaves no cache).
MEM_MIB, DISK_MIB = 256, 512
TIER = "daemons-test/kubepods/besteffort"


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield boot_guest(GUEST, tmp_path_factory.mktemp("daemons-reclaim") / "out", mem_mib=MEM_MIB, timeout_s=300,
                     kernel="default", disk_mib=DISK_MIB)


def outcome(run: Any, name: str) -> dict[str, Any]:
    if not (run.out / name).exists():
        raise AssertionError(f"the guest wrote no {name}:\n{run.text('daemons-reclaim.log')[-3000:]}")
    document: dict[str, Any] = run.json(name)
    if "error" in document:
        raise AssertionError(f"guest scenario failed: {document['traceback']}\n"
                             f"{run.text('daemons-reclaim.log')[-3000:]}")
    return document


@pytest.fixture(scope="module")
def seen(guest: Any) -> dict[str, Any]:
    return outcome(guest, "daemons-reclaim.json")


@pytest.fixture(scope="module")
def protection(guest: Any) -> dict[str, Any]:
    return outcome(guest, "daemons-protection.json")


def test_quiet_daemons_reclaim_nothing(seen: dict[str, Any]) -> None:
    assert seen["unavailable"] is None
    assert seen["quietFigureBp"] is not None and seen["quietFigureBp"] < TRIGGER_BASIS_POINTS, seen
    assert "under 10%" in seen["quietPlan"]["skipped"]


def test_the_daemons_refaulting_after_a_stream_is_seen_by_the_figure(seen: dict[str, Any]) -> None:
    """The daemon's 48 MiB, pushed out by the 384 MiB stream, read again: the kernel counts re-reads in system.slice
    and the figure is over the trigger."""
    assert seen["rereadBytes"] >= 8 * MiB, seen
    assert seen["figureBp"] is not None and seen["figureBp"] >= TRIGGER_BASIS_POINTS, seen


def test_memory_reclaim_drops_the_streaming_pods_cache_and_never_the_daemons(seen: dict[str, Any]) -> None:
    """The stream's cache is inactive: only a fall counted in usage sees it go (the working set would not move)."""
    tiers = {holder["tier"]: holder for holder in seen["holders"]}
    assert tiers["besteffort"]["inactive"] >= 32 * MiB, seen["holders"]
    plan = seen["plan"]
    assert "skipped" not in plan, plan
    asked = plan["asked"]
    assert plan["byUsage"] and plan["targets"] == [[TIER, asked]], plan
    cache = tiers["besteffort"]["inactive"] + tiers["besteffort"]["active"]
    assert asked == min(-(-seen["daemonsMemory"] // 4096) * 4096, cache), seen  # the daemons' memory, page-rounded
    outcome, before, after = seen["outcome"], seen["before"], seen["after"]
    assert outcome["stopped"] == "done" and outcome["freed"] >= asked, seen
    assert before["tierUsage"] - after["tierUsage"] >= asked - MiB, seen
    assert before["tierFile"] - after["tierFile"] >= asked - 2 * MiB, seen  # page cache, not anonymous memory
    assert after["daemonsFile"] >= before["daemonsFile"] - MiB, "system.slice's cache was reclaimed"


PROTECTION_BYTES = 96 * MiB
OPERATOR_BYTES = 128 * MiB


def test_a_slice_protection_needs_cgroup2_mounted_with_recursive_protection(protection: dict[str, Any]) -> None:
    """The guest mounts cgroup2 as a plain `mount -t cgroup2` does: evictd says why it keeps nothing; after a
    remount as systemd mounts it, nothing stops it."""
    assert "without memory_recursiveprot" in protection["unavailableBefore"], protection["unavailableBefore"]
    assert protection["unavailable"] is None
    # `run`'s builder then keeps one: auto, no reservation, a guest under 1 GiB: GKE's flat 255 MiB, at most the
    # guest's memory, in whole MiB.
    assert protection["builtTarget"] == min(255 * MiB, protection["memTotal"] // MiB * MiB)


def test_evictd_keeps_its_memory_low_and_writes_it_again_after_a_reset(protection: dict[str, Any]) -> None:
    steps = protection["steps"]
    assert steps["applied"] == ["applied", PROTECTION_BYTES]
    assert steps["afterReset"] == ["applied", PROTECTION_BYTES]  # systemd's reload wrote 0; evictd writes it again
    # The daemons refault figure reads it beside their re-reads: its share is of the part beyond it.
    assert steps["countedProtection"] == PROTECTION_BYTES
    assert PROTECTION_BYTES in protection["gauge"]


def test_an_operators_memory_low_stands_and_is_never_taken_back(protection: dict[str, Any]) -> None:
    steps = protection["steps"]
    assert steps["operators"] == ["node's own", OPERATOR_BYTES]
    assert steps["operatorsAfterStop"] == OPERATOR_BYTES
    warned = [line for line in protection["log"] if line["state"] == "node's own"]
    assert warned and "memory.low=128 MiB" in warned[0]["detail"], protection["log"]


def test_dry_run_and_stop_take_evictds_memory_low_back(protection: dict[str, Any]) -> None:
    steps = protection["steps"]
    assert steps["dryRun"] == ["dry-run", 0]
    assert steps["again"] == ["applied", PROTECTION_BYTES]
    assert steps["stopped"] == 0
    assert steps["countedAfterStop"] == 0
    assert protection["gauge"][-1] == 0


def test_with_evictds_memory_low_the_stream_leaves_the_daemons_cache(protection: dict[str, Any]) -> None:
    """The daemon's 48 MiB file, then the BestEffort pod's 384 MiB stream through the 256 MiB guest."""
    protected, unprotected = protection["protected"], protection["unprotected"]
    assert protected["before"] >= 40 * MiB and unprotected["before"] >= 40 * MiB, protection
    assert protected["after"] >= protected["before"] - 4 * MiB, protected  # kept
    assert unprotected["after"] <= unprotected["before"] - 16 * MiB, unprotected  # pushed out without it


def test_a_breach_of_the_protection_is_counted_and_the_figure_counts_what_was_taken(protection: dict[str, Any]) -> None:
    """The root asked for 256 MiB with the daemon's 48 MiB file under evictd's 96 MiB memory.low: the kernel reclaims
    below it only when nothing else is left, counts each such reclaim in system.slice's memory.events ``low``, and
    its memory.stat ``pgsteal`` counts the pages taken; the daemons' figure takes those as re-read."""
    breach = protection["breach"]
    (low_before, low_after), (taken_before, taken_after) = breach["low"], breach["reclaimed"]
    assert low_before is not None and taken_before is not None, breach  # the kernel prints both
    assert low_after > low_before, breach
    assert breach["file"][0] >= 40 * MiB and breach["file"][1] <= breach["file"][0] - 16 * MiB, breach
    assert taken_after - taken_before >= 16 * MiB, breach
    assert breach["lostBytes"] is not None and breach["lostBytes"] >= taken_after - taken_before, breach  # scaled
    assert breach["figureBp"] == 10_000, breach  # over 32 MiB of exposed memory in the window: capped


def test_the_protected_cache_is_counted_uncovered_and_the_kernel_breaks_in_near_it(protection: dict[str, Any]) -> None:
    """A BestEffort pod allocates 32 MiB/s beside the daemon's 48 MiB file under a 96 MiB memory.low, looked at each
    50 ms: MemAvailable falls to that cache, and evictd's figure counts the part it no longer covers, as the kernel's
    files give it. On this 256 MiB guest the kernel's first reclaim below memory.low comes while MemAvailable is
    within a few MiB of the cache (its watermarks are small): quiet, at the same look as the figure (0.2 MiB not
    covered); with make test's load beside, 1.8 MiB above it, and then it took the protected cache as fast as
    MemAvailable fell, so the figure came 19 s after the breach, which its ``low`` count answers instead
    (docs/node-survival.md). On the arena's 2.5 GiB guests it came 2.3-8.3 s before."""
    approach = protection["approach"]
    seen, breached = approach["seen"], approach["breached"]
    assert seen is not None, approach  # counted before the pod was done or killed
    assert approach["start"]["file"] >= 40 * MiB and seen["protected"] >= 96 * MiB, approach
    assert 0 < seen["uncovered"] <= seen["file"] and seen["available"] < seen["file"], approach
    assert seen["uncovered"] == min(seen["file"], seen["protected"] - (seen["usage"] - seen["file"])) - seen["available"]
    if breached is not None:  # the breach came first: MemAvailable was near the protected cache then
        assert breached["available"] - breached["file"] < 8 * MiB, approach
