"""Where deploy/monitoring's files are, and the dashboard's queries, for the monitoring tests."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "evictd.rules.yaml"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
PODMONITOR = MONITORING / "podmonitor.yaml"
SCRAPE_CONFIG = MONITORING / "scrape-config.yaml"
DASHBOARD = MONITORING / "evictd-dashboard.json"


def dashboard_queries() -> list[tuple[str, str]]:
    """Return (panel title, PromQL) of every query of every panel of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", ())]
