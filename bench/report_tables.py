"""Write the result tables of README.md and docs/ from the records under bench/results/.

A table in a page sits between `<!-- table: NAME -->` and `<!-- end table -->`; NAME is one of TABLES below,
which selects its records (those whose `tables` list names it, in file order, or a whole file) and says how each
row is drawn. The records are JSON lines, one a run or one a cell of runs: machine, kernel, load, date, commit,
settings, runs, outcomes, per_run (where the run kept them), source. Invariants: the pages' tables are a pure
function of the records (no clock, no machine state), and every marker names a known table.

    python bench/report_tables.py           # rewrite the tables in place
    python bench/report_tables.py --check   # exit 1 naming each table that differs from its records
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGES = ("README.md", "docs/node-survival.md", "docs/measured-figures.md")
MARKER = re.compile(r"(<!-- table: ([\w-]+) -->\n)(.*?)(<!-- end table -->)", re.DOTALL)

Record = dict[str, object]


def num(value: object) -> str:
    """A figure as the records hold it; '-' where there is none."""
    return "-" if value is None else str(value)


def pair(value: object) -> str:
    """A [median, worst] or [p50, p90, p99] list as `a / b`, '-' where absent."""
    if value is None:
        return "-"
    assert isinstance(value, list)
    return " / ".join(num(v) for v in value)


def out(record: Record, key: str) -> object:
    outcomes = record["outcomes"]
    assert isinstance(outcomes, dict)
    return outcomes.get(key)


def setting(record: Record, key: str) -> object:
    settings = record["settings"]
    assert isinstance(settings, dict)
    return settings.get(key)


def protector(record: Record) -> str:
    note = record.get("note")
    name = f"**{setting(record, 'protector')}**" if setting(record, "protector") == "evictd" else str(
        setting(record, "protector"))
    return f"{name} ({note})" if note and len(str(note)) <= 40 else name


def of_runs(count_key: str, invert: bool = False) -> Callable[[Record], str]:
    def cell(record: Record) -> str:
        runs = record["runs"]
        assert isinstance(runs, int)
        count = out(record, count_key)
        assert isinstance(count, int)
        return f"{runs - count if invert else count} of {runs}"
    return cell


def each_run(record: Record, key: str) -> str:
    per_run = record["per_run"]
    assert isinstance(per_run, dict)
    return ", ".join(num(v) for v in per_run[key])


def span(value: object) -> str:
    """[low, high] as `low-high`, or one figure when both are the same."""
    assert isinstance(value, list)
    return "-".join(num(v) for v in dict.fromkeys(value))


def guest(record: Record) -> str:
    return f"{setting(record, 'vm')} {record['guest_kernel']}, {setting(record, 'cpus')} CPU"


def margin(record: Record) -> str:
    limit = setting(record, "limit_mib")
    assert isinstance(limit, int)
    used = max(float(str(out(record, "highest_sample_mib"))), float(str(out(record, "peaks_added_mib"))))
    return f"{limit - used:.0f} MiB ({(limit - used) / limit:.0%})"


Column = tuple[str, Callable[[Record], str]]


@dataclass(frozen=True)
class Table:
    columns: tuple[Column, ...]
    file: str | None = None  # every record of this file, in order, instead of those naming the table
    order: Callable[[Record], object] | None = None  # rows sorted by this, stably; file order without it


WORKLOAD: Column = ("workload", lambda r: str(setting(r, "workload")))
PROTECTOR: Column = ("protector", protector)
RUNS: Column = ("runs", lambda r: num(r["runs"]))

TABLES: dict[str, Table] = {
    "real-who": Table((WORKLOAD, PROTECTOR, RUNS,
                       ("runs with a kernel OOM kill", of_runs("oom_kill_runs")),
                       ("how the pressure pods stopped (all runs)", lambda r: str(out(r, "stopped"))),
                       ("Guaranteed pod and daemon alive", of_runs("alive")))),
    "real-time": Table((WORKLOAD, PROTECTOR,
                        ("s under 1 % available", lambda r: pair(out(r, "below_1pct_s"))),
                        ("s to relief", lambda r: pair(out(r, "relief_s"))),
                        ("daemon's longest gap s", lambda r: pair(out(r, "daemon_gap_s"))))),
    "many-small": Table((WORKLOAD, PROTECTOR, RUNS,
                         ("pods stopped a run", lambda r: pair(out(r, "stopped_per_run"))),
                         ("kernel OOM kills (all runs)", lambda r: num(out(r, "oom_killed"))),
                         ("how they stopped (all runs)", lambda r: str(out(r, "stopped"))),
                         ("s under 1 % available", lambda r: pair(out(r, "below_1pct_s"))),
                         ("s to relief", lambda r: pair(out(r, "relief_s"))))),
    "stall": Table((("guest", guest), PROTECTOR, RUNS,
                    ("runs with a kernel OOM kill", of_runs("oom_kill_runs")),
                    ("pods stopped (all runs)", lambda r: str(out(r, "stopped"))),
                    ("daemon's longest gap s", lambda r: pair(out(r, "daemon_gap_s"))),
                    ("kubelet stand-in's longest gap s", lambda r: pair(out(r, "kubelet_gap_s"))),
                    ("PSI `full` stall s", lambda r: pair(out(r, "psi_full_s"))),
                    ("s to relief", lambda r: pair(out(r, "relief_s"))))),
    "false-triggers": Table((("guest", guest), WORKLOAD, PROTECTOR, RUNS,
                             ("pods evicted a run", lambda r: pair(out(r, "evicted"))),
                             ("runs with a kernel OOM kill", of_runs("oom_kill_runs")),
                             ("daemon's longest gap s", lambda r: pair(out(r, "daemon_gap_s"))))),
    "daemons-reclaim": Table((("guest", guest), WORKLOAD, PROTECTOR, RUNS,
                              ("pods evicted a run", lambda r: pair(out(r, "evicted"))),
                              ("runs with a kernel OOM kill", of_runs("oom_kill_runs")),
                              ("daemon's longest gap s", lambda r: pair(out(r, "daemon_gap_s"))),
                              ("daemon's gap each run s", lambda r: each_run(r, "daemon_gap_s")),
                              ("kubelet stand-in's longest gap s", lambda r: pair(out(r, "kubelet_gap_s"))),
                              ("kubelet stand-in's gap each run s", lambda r: each_run(r, "kubelet_gap_s"))),
                             order=lambda r: str(setting(r, "workload"))),
    "oomd": Table((WORKLOAD, RUNS,
                   ("systemd-oomd kills", lambda r: num(out(r, "oomd_kills"))),
                   ("runs with a kernel OOM kill", of_runs("oom_kill_runs")),
                   ("s under 1 % available", lambda r: pair(out(r, "below_1pct_s"))),
                   ("daemon's longest gap s", lambda r: pair(out(r, "daemon_gap_s"))),
                   ("s to relief", lambda r: pair(out(r, "relief_s"))))),
    "reclaim": Table((WORKLOAD, PROTECTOR, RUNS,
                      ("pods evicted a run", lambda r: pair(out(r, "evicted"))),
                      ("who (all runs)", lambda r: str(out(r, "stopped"))),
                      ("s to relief", lambda r: pair(out(r, "relief_s"))),
                      ("daemon's longest gap s", lambda r: pair(out(r, "daemon_gap_s")))),
                     order=lambda r: str(setting(r, "workload"))),
    "controls": Table((("node", lambda r: f"{setting(r, 'backend')}, {r['guest_kernel']}"), WORKLOAD, PROTECTOR, RUNS,
                       ("the daemon's failed forks or writes", lambda r: pair(out(r, "daemon_failures"))),
                       ("s disk full", lambda r: pair(out(r, "disk_full_s"))),
                       ("evicted (all runs)", lambda r: str(out(r, "evicted_all"))))),
    "thrash-arena": Table((("60 s each", lambda r: str(setting(r, "variant"))),
                           ("PSI `some` / `full` stalled s", lambda r: f"{num(out(r, 'psi_some_s'))} / "
                                                                       f"{num(out(r, 'psi_full_s'))}"),
                           ("peak avg10 `some` / `full` %", lambda r: pair(out(r, "peak_avg10_some_full_pct"))),
                           ("kernel OOM kills", lambda r: num(out(r, "oom_kills"))),
                           ("lowest allocatable available MiB", lambda r: num(out(r, "lowest_allocatable_mib"))),
                           ("pods stopped", lambda r: str(out(r, "stopped"))))),
    "busy-node": Table((("beside the test suite", lambda r: str(setting(r, "load_beside")).split(",")[0]),
                        ("`memoryCrossingHold`", lambda r: str(setting(r, "memoryCrossingHold"))),
                        ("load average", lambda r: str(r["load"])),
                        ("evictd p50 / p90 / p99 ms", lambda r: pair(out(r, "evictd_p50_p90_p99_ms"))),
                        ("earlyoom p50 / p99 ms", lambda r: pair(out(r, "earlyoom_p50_p99_ms"))))),
    "flapping": Table((("20 Hz tenant over", lambda r: f"the {setting(r, 'threshold')} threshold"),
                       ("code", lambda r: str(setting(r, "code"))),
                       ("CPU % of a core, each run", lambda r: each_run(r, "cpu_pct_of_a_core")),
                       ("cycles a minute", lambda r: span(out(r, "cycles_a_minute"))))),
    "memory": Table((("pods", lambda r: f"{setting(r, 'pods'):,}"),
                     ("daemon", lambda r: str(setting(r, "daemon"))),
                     ("evictd MiB", lambda r: num(out(r, "evictd_mib"))),
                     ("disk walker MiB", lambda r: num(out(r, "walker_mib"))),
                     ("together MiB", lambda r: num(out(r, "together_mib"))),
                     ("highest sample / peaks added MiB", lambda r: f"{num(out(r, 'highest_sample_mib'))} / "
                                                                    f"{num(out(r, 'peaks_added_mib'))}"),
                     ("margin to the 192 MiB limit", margin))),
    "quiet-latency": Table((("where", lambda r: str(setting(r, "where"))),
                            ("crossing", lambda r: str(setting(r, "crossing"))),
                            ("`memoryCrossingHold`", lambda r: str(setting(r, "memoryCrossingHold") or "-")),
                            ("crossings", lambda r: num(r["runs"])),
                            ("p50 / max ms", lambda r: f"{num(out(r, 'p50_ms'))} / {num(out(r, 'max_ms'))}"))),
    "kubelet-side-by-side": Table((("signal", lambda r: str(setting(r, "signal"))),
                                   ("", lambda r: str(setting(r, "side"))),
                                   ("pod chosen", lambda r: str(out(r, "pod_chosen"))),
                                   ("crossing to SIGTERM p50 / p90 / max s",
                                    lambda r: pair(out(r, "crossing_to_sigterm_p50_p90_max_s"))),
                                   ("crossing to stopped p50 / p90 / max s",
                                    lambda r: pair(out(r, "crossing_to_stopped_p50_p90_max_s"))))),
    "busy-idle": Table((("30 s beside a loop writing and deleting 64 MiB", lambda r: str(setting(r, "case"))),
                        ("code", lambda r: str(setting(r, "code"))),
                        ("cycles", lambda r: num(out(r, "cycles"))),
                        ("CPU s", lambda r: num(out(r, "cpu_s"))),
                        ("CPU s an hour", lambda r: num(out(r, "cpu_s_per_hour"))))),
    "api-writes": Table((("one minute of held pressure", lambda r: str(setting(r, "what"))),
                         ("evictd", lambda r: num(out(r, "evictd"))),
                         ("the kubelet", lambda r: num(out(r, "kubelet"))))),
    "recorder": Table((("pods", lambda r: num(setting(r, "pods"))),
                       ("", lambda r: str(setting(r, "variant"))),
                       ("cycle CPU ms", lambda r: span(out(r, "cycle_cpu_ms"))),
                       ("recorder CPU ms", lambda r: span(out(r, "recorder_cpu_ms"))),
                       ("share of the cycle %", lambda r: span(out(r, "recorder_share_pct"))),
                       ("`fdatasync` wait ms", lambda r: span(out(r, "fdatasync_wait_ms"))),
                       ("written / gzip KiB a cycle", lambda r: pair(out(r, "written_gzip_kib"))),
                       ("64 MiB lasts, h", lambda r: num(out(r, "hours_64mib_lasts"))))),
    "readers": Table((("reader, a fresh process", lambda r: f"`evictd {setting(r, 'reader')}`"),
                      ("wall s", lambda r: span(out(r, "wall_s"))),
                      ("peak RSS MiB", lambda r: num(out(r, "peak_rss_mib"))))),
    "metrics-flood": Table((("endpoint", lambda r: str(r["endpoint"])),
                            ("requests a second", lambda r: num(r["requests_per_s"])),
                            ("CPU, share of a core", lambda r: f"{float(str(r['cpu_share_of_a_core'])):.1%}"),
                            ("`/healthz` p50 / max ms", lambda r: f"{num(r['healthz_p50_ms'])} / "
                                                                   f"{num(r['healthz_max_ms'])}"),
                            ("load before", lambda r: f"{float(str(r['load_before'])):.1f}")),
                           file="metrics_flood.jsonl"),
}


@dataclass(frozen=True)
class Claim:
    """One line of README's "Why" table: a sentence with one figure, the record it comes from, where to read more."""
    text: str  # with {} where the figure goes
    record: str
    figure: Callable[[Record], str]
    report: str


CLAIMS = (
    Claim("A pod leaking 200 MiB/s on a real node, quiet host: evicted before the kernel's OOM killer in {} runs",
          "b-befast-ev", of_runs("oom_kill_runs", invert=True),
          "docs/node-survival.md#who-is-killed"),
    Claim("The same leak with the kubelet's own eviction, evictd's thresholds: OOM-killed in {} runs",
          "b-befast-ks", of_runs("oom_kill_runs"), "docs/node-survival.md#who-is-killed"),
    Claim("A thrashing 2-CPU node with PSI, as shipped: the daemons' longest stall {} s, worst of 5 runs",
          "qemu-thrash-shipped-follow-up", lambda r: num(out(r, "daemon_gap_s")[1]),  # type: ignore[index]
          "docs/node-survival.md#how-long-the-node-stalls"),
    Claim("Beside the real kubelet, the same pod chosen; signalled {} s after the crossing (median)",
          "ks-memory-1", lambda r: num(out(r, "crossing_to_sigterm_p50_p90_max_s")[0]),  # type: ignore[index]
          "docs/measured-figures.md#beside-the-real-kubelet"),
    Claim("A memory crossing decided within {} ms at p99, as shipped, on a host at load 6 running the tests",
          "busy-0", lambda r: num(out(r, "evictd_p50_p90_p99_ms")[2]),  # type: ignore[index]
          "docs/measured-figures.md#how-fast-it-decides"),
    Claim("At 5,000 pods, evictd and its disk walker at most {} MiB, under the shipped 192 MiB limit",
          "rss-5000-in-cluster", lambda r: num(out(r, "peaks_added_mib")),
          "docs/measured-figures.md#its-own-memory"),
)


def load_records(results: Path) -> dict[str, list[Record]]:
    """Every results file's records, by file name."""
    return {path.name: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            for path in sorted(results.glob("*.jsonl"))}


def select(name: str, files: dict[str, list[Record]]) -> list[Record]:
    table = TABLES[name]
    if table.file is not None:
        return files[table.file]
    chosen = [r for records in files.values() for r in records if name in r.get("tables", [])]  # type: ignore[operator]
    return sorted(chosen, key=table.order) if table.order else chosen  # type: ignore[arg-type]


def markdown(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render(name: str, files: dict[str, list[Record]]) -> str:
    if name == "readme-claims":
        by_id = {str(r.get("id")): (file, r) for file, records in files.items() for r in records}
        rows = []
        for claim in CLAIMS:
            file, record = by_id[claim.record]
            rows.append([claim.text.format(f"**{claim.figure(record)}**"),
                         f"[report]({claim.report}), [record](bench/results/{file})"])
        return markdown(["measured", "data"], rows)
    records = select(name, files)
    if not records:
        raise SystemExit(f"table {name}: no record names it")
    columns = TABLES[name].columns
    return markdown([title for title, _ in columns], [[cell(r) for _, cell in columns] for r in records])


def regenerate(text: str, files: dict[str, list[Record]], page: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in TABLES and name != "readme-claims":
            raise SystemExit(f"{page}: unknown table {name!r} (known: {', '.join(TABLES)}, readme-claims)")
        return match.group(1) + render(name, files) + match.group(4)
    return MARKER.sub(replace, text)


def differing(root: Path = ROOT, results: Path = RESULTS) -> list[str]:
    """The tables (page: name) whose text differs from what their records give."""
    files = load_records(results)
    found = []
    for page in PAGES:
        text = (root / page).read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            fresh = regenerate(match.group(0), files, page)
            if fresh != match.group(0):
                found.append(f"{page}: {match.group(2)}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    args = parser.parse_args(argv)
    if args.check:
        stale = differing()
        for line in stale:
            print(f"stale table: {line} (run python bench/report_tables.py)", file=sys.stderr)
        return 1 if stale else 0
    files = load_records(RESULTS)
    for page in PAGES:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        fresh = regenerate(text, files, page)
        if fresh != text:
            path.write_text(fresh, encoding="utf-8")
            print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
