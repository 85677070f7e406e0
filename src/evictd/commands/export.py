"""`evictd record export`: a recording written out as one `simulate` scenario (YAML), step by step as it is read.

Head and steps come from `recording.scenario_parts`; each step is one line of YAML flow style (far faster than
PyYAML's representer). Several runs play as one scenario from the first's start state: a warning says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TextIO

import yaml

from evictd.cycle.render import yaml_flow
from evictd.record.recording import Record, Recording, scenario_parts, unknown_start_state
from evictd.record.segment_files import Problem

SEVERAL_RUNS = ("the recording holds several runs of evictd; the scenario runs them as one (from the state the "
                "first started from)")


def export(recording: Recording, out: TextIO, warn: Problem) -> None:
    """Write `recording` to `out` as a scenario; `warn` is told what a person should know (lines skipped, several
    runs, an unknown start state). Raises EvictdError when the recording holds no cycle."""
    runs: set[str] = set()
    seen = [False]

    def counted() -> Iterator[Record]:
        for record in recording:
            seen[0] = True
            runs.add(record.run)
            yield record

    head, start, steps = scenario_parts(counted())
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    if head is None:
        recording.check_read(seen[0], warn)
        yaml.dump({"steps": []}, out, Dumper=dumper)
        return
    yaml.dump(head, out, Dumper=dumper, sort_keys=False)
    out.write("steps:\n")
    for _, step in steps:
        try:
            out.write(f"- {yaml_flow(step)}\n")
        except (RecursionError, ValueError):
            warn("a recorded step that cannot be written (nested too deeply): left out")
    recording.check_read(seen[0], warn)
    if len(runs) > 1:
        warn(SEVERAL_RUNS)
    unknown = unknown_start_state(start)
    if unknown is not None:
        warn(unknown)
