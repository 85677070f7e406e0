"""Test helper: a recorded decision as the JSON document its line holds, through the recording model's own codec
(`evictd.record.model.encode_line`), for tests that compare it with `simulate`'s steps or write older lines."""

from __future__ import annotations

import json
from typing import Any

from evictd.record.decision import Decision
from evictd.record.model import Line, encode_line


def decision_document(decision: Decision) -> dict[str, Any]:
    """`decision` as the recording writes it: the "decision" of a line holding it."""
    document: dict[str, Any] = json.loads(encode_line(Line(run="", cycle=0, wall=0.0, now=0.0, decision=decision)))
    return dict(document["decision"])
