"""The PSI trigger rules: what the kernel would refuse is a configuration error at the setting's key."""

from __future__ import annotations

import re

import pytest

from evictd.core.errors import ConfigError
from evictd.core.psi import psi_trigger


@pytest.mark.parametrize(
    ("kind", "stall_us", "window_us", "privileged", "expected"),
    [
        pytest.param("some", 150_000, 2_000_000, False, "some 150000 2000000", id="some-150ms-2s"),
        pytest.param("full", 10_000, 10_000_000, False, "full 10000 10000000", id="full-10s"),
        pytest.param("some", 100_000, 1_000_000, True, "some 100000 1000000", id="privileged-1s"),
        pytest.param("some", 500_000, 500_000, True, "some 500000 500000", id="privileged-minimum-window"),
    ],
)
def test_psi_trigger_text(kind: str, stall_us: int, window_us: int, privileged: bool, expected: str) -> None:
    assert psi_trigger(kind, stall_us, window_us, privileged=privileged) == expected


@pytest.mark.parametrize(
    ("kind", "stall_us", "window_us", "privileged", "key", "message"),
    [
        pytest.param("avg", 150_000, 2_000_000, False, "psi.kind", "one of some, full", id="unknown-kind"),
        pytest.param("some", 100_000, 1_000_000, False, "psiWindow", "whole multiple of 2s", id="unprivileged-1s"),
        pytest.param("some", 100_000, 3_000_000, False, "psiWindow", "whole multiple of 2s", id="unprivileged-3s"),
        pytest.param("some", 100_000, 400_000, True, "psiWindow", "between 500ms and 10s", id="window-too-short"),
        pytest.param(
            "some", 100_000, 12_000_000, False, "psiWindow", "between 500ms and 10s", id="window-too-long"
        ),
        pytest.param("some", 0, 2_000_000, False, "psiStallThreshold", "more than 0", id="zero-stall"),
        pytest.param(
            "some", 2_000_001, 2_000_000, False, "psiStallThreshold", "at most the window (2s)", id="stall-over-window"
        ),
    ],
)
def test_psi_trigger_rejects_what_the_kernel_would_refuse(
    kind: str, stall_us: int, window_us: int, privileged: bool, key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        psi_trigger(kind, stall_us, window_us, privileged=privileged)
    assert caught.value.key == key
