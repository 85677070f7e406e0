"""deploy/monitoring: alert rules, PodMonitor and dashboard, checked with Debian's promtool and a real scrape.

- `promtool check rules` on the plain rules file and on the PrometheusRule's groups, which must be identical;
- `promtool test rules` on tests/deploy/monitoring/*.test.yaml, which must cover every alert, each firing and not
  firing, and every recording rule; each alert names a runbook that is a section of docs/runbooks.md;
- every metric the rules and the dashboard read is one evictd exports (its registry) or a recording rule's;
- `promtool check metrics` on a real scrape of `evictd run` (naming conventions, units, `_total` counters);
- the PodMonitor selects the DaemonSet's pods and port and gives the labels the rules and dashboard expect;
- the dashboard's panels and variables are well formed (their queries run on a real Prometheus in
  test_monitoring_prometheus.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from evictd_process import EvictdProcess
from monitoring_files import DASHBOARD, PODMONITOR, PROMETHEUS_RULE, REPO, RULES, SCRAPE_CONFIG, dashboard_queries
from prometheus_server import PROMTOOL, debian_binary

from markdown_anchors import anchors

RULE_TESTS = sorted((Path(__file__).resolve().parent / "monitoring").glob("*.rules.test.yaml"))
DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"
RUNBOOKS = REPO / "docs" / "runbooks.md"


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([debian_binary(PROMTOOL), *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=120)


def alerts(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"] if "alert" in rule]


def recording_rules(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"] if "record" in rule]


def metric_names(expr: str) -> set[str]:
    """The evictd series an expression reads (evictd's metrics and recording rules all start with `evictd`)."""
    return set(re.findall(r"\bevictd[_:][A-Za-z0-9_:]*", expr))


def exported_names() -> set[str]:
    """Every series name a scrape of evictd can hold: each metric family's samples (`_total`, `_bucket`...)."""
    from evictd.observe.metrics import Metrics

    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_count", "_sum", "_created"))
    return names


def test_rules_file_and_prometheus_rule_pass_promtool_and_are_identical(tmp_path: Path) -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    operator_rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert (operator_rule["apiVersion"], operator_rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert operator_rule["metadata"]["namespace"] == "evictd-system"
    assert operator_rule["spec"] == yaml.safe_load(RULES.read_text()), "the two rule files drifted apart"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(operator_rule["spec"]))
    done = promtool("check", "rules", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_check_rules_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("groups:\n- name: x\n  rules:\n  - alert: Broken\n    expr: sum(rate(up[5m]) by\n")
    assert promtool("check", "rules", str(broken)).returncode != 0


def test_every_alert_is_unit_tested_firing_and_quiet_and_promtool_passes() -> None:
    groups = yaml.safe_load(RULES.read_text())
    names = {rule["alert"] for rule in alerts(groups)}
    assert len(names) == 15
    tests = [test for path in RULE_TESTS for test in yaml.safe_load(path.read_text())["tests"]]
    cases = [case for test in tests for case in test.get("alert_rule_test", ())]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert firing == names and quiet == names, f"untested: {names - firing} firing, {names - quiet} quiet"
    # Every recording rule's value is asserted: by name, or read by a rule whose value is.
    records = {rule["record"]: rule["expr"] for rule in recording_rules(groups)}
    assert len(records) == 6
    asserted = {name for test in tests for case in test.get("promql_expr_test", ()) for name in metric_names(case["expr"])}
    covered = set(asserted)
    while grown := {name for read_by in covered & set(records) for name in metric_names(records[read_by])
                    if name in records and name not in covered}:
        covered |= grown
    assert "evictd:ready_to_act" in asserted and set(records) <= covered, set(records) - covered
    for path in RULE_TESTS:
        done = promtool("test", "rules", path.name, cwd=path.parent)
        assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_rule_tests_can_fail(tmp_path: Path) -> None:
    """The fleet rule tests assert evictd:ready_to_act: a rule that lets one-sided comparisons pass fails them."""
    lax = tmp_path / "lax.rules.yaml"
    text = RULES.read_text()
    one_sided = 'outcome=~"evictd-only|kubelet-only"}) > 0)'
    assert text.count(one_sided) == 1
    lax.write_text(text.replace(one_sided, 'outcome=~"evictd-only|kubelet-only"}) > 1e9)'))
    [fleet] = [path for path in RULE_TESTS if path.name.startswith("evictd-fleet")]
    copy = tmp_path / fleet.name
    copy.write_text(fleet.read_text().replace("../../../deploy/monitoring/evictd.rules.yaml", str(lax)))
    done = promtool("test", "rules", copy.name, cwd=tmp_path)
    assert done.returncode != 0 and 'instance="node-3", job="evictd"} 1E+00' in done.stderr, done.stdout + done.stderr


def test_rules_and_dashboard_read_only_what_evictd_exports_or_the_rules_record() -> None:
    groups = yaml.safe_load(RULES.read_text())
    known = exported_names() | {rule["record"] for rule in recording_rules(groups)}
    read = {name: where for where, expr in [*((rule.get("alert") or rule["record"], rule["expr"])
                                               for group in groups["groups"] for rule in group["rules"]),
                                             *dashboard_queries()]
            for name in metric_names(expr)}
    assert {"evictd_shadow_comparisons_total", "evictd_mode", "evictd_handover_conflict"} <= set(read)
    unknown = {name: where for name, where in read.items() if name not in known}
    assert unknown == {}, f"read but neither exported by evictd nor recorded: {unknown}"


def test_every_alert_has_a_severity_and_a_runbook_section_in_the_docs() -> None:
    sections = anchors(RUNBOOKS)
    for rule in alerts(yaml.safe_load(RULES.read_text())):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        runbook = rule["annotations"]["runbook"]
        assert runbook == f"docs/runbooks.md#{rule['alert'].lower()}", runbook
        assert runbook.split("#")[1] in sections, f"docs/runbooks.md has no section for {rule['alert']}"


def test_podmonitor_scrapes_the_daemonset_as_the_rules_expect() -> None:
    monitor = yaml.safe_load(PODMONITOR.read_text())
    daemonset = yaml.safe_load(DAEMONSET.read_text())
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    ports = {port["name"] for container in daemonset["spec"]["template"]["spec"]["containers"]
             for port in container.get("ports", ())}
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    spec = monitor["spec"]
    assert spec["namespaceSelector"]["matchNames"] == [daemonset["metadata"]["namespace"]]
    assert all(pod_labels.get(key) == value for key, value in spec["selector"]["matchLabels"].items())
    assert pod_labels[spec["jobLabel"]] == "evictd", "the rules select job=\"evictd\""
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance",
            "action": "replace"} in endpoint["relabelings"]


def test_the_plain_scrape_job_selects_and_labels_as_the_podmonitor() -> None:
    # The same pods, port and labels as the PodMonitor, for a Prometheus without the Operator. Debian's Prometheus
    # has no Kubernetes discovery: a real one runs this job in the real-cluster tier (tests/cluster/test_fleet_real.py).
    (job,) = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
    monitor = yaml.safe_load(PODMONITOR.read_text())["spec"]
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert job["job_name"] == "evictd" and job["metrics_path"] == endpoint["path"]
    (discovery,) = job["kubernetes_sd_configs"]
    assert discovery["role"] == "pod" and discovery["namespaces"]["names"] == monitor["namespaceSelector"]["matchNames"]
    assert discovery["selectors"] == [{"role": "pod", "label": ",".join(
        f"{key}={value}" for key, value in monitor["selector"]["matchLabels"].items())}]
    keep, instance = job["relabel_configs"]
    assert (keep["source_labels"], keep["regex"], keep["action"]) == (
        ["__meta_kubernetes_pod_container_port_name"], endpoint["port"], "keep")
    assert (instance["source_labels"], instance["target_label"]) == (["__meta_kubernetes_pod_node_name"], "instance")


def test_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert variables == {"datasource", "instance"}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
    queries = dashboard_queries()
    assert len(queries) >= 20
    for title, expr in queries:
        assert 'instance=~"$instance"' in expr and 'job="evictd"' in expr, (title, expr)
        used = set(re.findall(r"\$(\w+)", expr))
        assert used <= variables | {"__rate_interval", "__range"}, (title, used)
    wanted = ("evictd_signal_available_bytes", "evictd_threshold_bytes", "evictd_node_condition",
              "evictd_evictions_total", "evictd_reclaimed_bytes_total", "evictd_cycle_duration_seconds_bucket",
              "evictd_wakeups_total", "evictd_oom_kills_total", "evictd_oom_kills_too_late_total",
              "evictd_shadow_comparisons_total", "evictd_mode", "evictd_handover_conflict", "evictd:ready_to_act",
              "evictd:shadow_agreement:ratio7d", "evictd:shadow_comparisons:increase7d", "evictd:dry_run_hours:count7d")
    text = " ".join(expr for _, expr in queries)
    assert all(name in text for name in wanted), [name for name in wanted if name not in text]


def test_a_real_scrape_of_evictd_run_passes_promtool_check_metrics(tmp_path: Path) -> None:
    daemon = EvictdProcess(tmp_path, evictd="housekeepingInterval: 200ms\n"
                                            "containerRuntimeEndpoint: unix:///nonexistent/evictd-test.sock\n")
    try:
        daemon.wait_event("evictd started")
        deadline = time.monotonic() + 10
        while daemon.metric("evictd_cycles_total") < 2:
            assert time.monotonic() < deadline, "evictd did not cycle"
            time.sleep(0.05)
        status, page = daemon.http("/metrics")
    finally:
        assert daemon.stop() == 0
    assert status == 200
    for name in ("evictd_signal_available_bytes", "evictd_signal_available_inodes", "evictd_signal_available_pids",
                 "evictd_oom_kills_total", "evictd_healthy", "evictd_cycle_duration_seconds_bucket"):
        assert f"\n{name}" in page, name
    done = promtool("check", "metrics", stdin=page)
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr
    # The check can fail: a counter without `_total` and a non-base unit are reported.
    bad = "# HELP x_latency_milliseconds d\n# TYPE x_latency_milliseconds counter\nx_latency_milliseconds 1\n"
    done = promtool("check", "metrics", stdin=bad)
    assert done.returncode != 0 and "_total" in done.stdout + done.stderr, done.stdout + done.stderr
