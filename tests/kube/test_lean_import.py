"""The lean import of the `kubernetes` package (src/evictd/kube/lean_import.py), in fresh processes.

evictd's cluster parts are built against the test API server in a new interpreter (nothing imported by pytest
counts there), and they work: pods listed, conditions and taints written. Checked afterwards in that process:
neither `kubernetes/__init__.py` nor the ApiClient, its models or pydantic were loaded; and a later full use of
the package (`from kubernetes import client; client.CoreV1Api`, `import kubernetes`) still works, next to
evictd's client. Also the other order: `kubernetes` fully imported first, then evictd's client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from kube_objects import node_manifest, pod_manifest

NODE = "node-1"
# What the lean import must not load: the package __init__ files' imports, the ApiClient, its models, pydantic.
HEAVY = ("kubernetes.client.api_client", "kubernetes.client.api", "kubernetes.client.models", "pydantic",
         "kubernetes.watch", "kubernetes.dynamic", "kubernetes.stream", "kubernetes.leaderelection",
         "kubernetes.informer", "kubernetes.utils.create_from_yaml",
         # what the kubeconfig loader needs for OIDC token refreshes only
         "requests", "requests_oauthlib.oauth2_session", "oauthlib.oauth2.rfc6749")

LEAN_FIRST = """
    import json, sys
    import structlog
    from evictd.adapters.cgroups import CgroupReader, detect_cgroup_layout
    from evictd.adapters.node_pods import DiscoveredPods
    from evictd.run.compose_cluster import build_cluster
    import evictd.run.composition  # the whole composition root, as `evictd run` loads it
    from evictd.config import load_configuration
    from evictd.core.engine import Assessment, NoneStarved
    from evictd.core.signals import NodeCondition
    from evictd.kube.client import build_api_client
    from evictd.kube.lean_import import is_deferred
    from evictd.observe.metrics import Metrics

    config_path, kubeconfig, node, heavy = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    config = load_configuration([config_path])
    parts = build_cluster(config, node, Metrics(), structlog.get_logger(), dry_run=False,
                          discovered=DiscoveredPods(CgroupReader(detect_cgroup_layout()), config.evictd.pod_logs_dir))
    parts.pod_watch.start()
    assessment = Assessment(NoneStarved(), node_conditions=(NodeCondition.MEMORY_PRESSURE,))
    parts.sync.after_cycle(assessment, None)
    result = {
        "pods": sorted(pod.name for pod in parts.pods.active_pods()),
        "loaded": sorted(name for name in heavy if name in sys.modules),
        "kubernetes_init_ran": "__version__" in vars(sys.modules["kubernetes"]),
        "deferred": [name for name in ("kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils")
                     if is_deferred(name)],
    }

    # Full use afterwards, in the same process.
    from kubernetes import client, config
    api_client = config.new_client_from_config(config_file=kubeconfig)
    stored = client.CoreV1Api(api_client).read_node(node)
    import kubernetes
    from kubernetes import watch
    result["full"] = {
        "true_conditions": sorted(c.type for c in stored.status.conditions if c.status == "True"),
        "taints": sorted(t.key for t in stored.spec.taints or []),
        "version": kubernetes.__version__,
        "watch": watch.Watch.__name__,
        "pod_model": type(client.V1Pod(metadata=client.V1ObjectMeta(name="x"))).__name__,
        "api_client_is_real": isinstance(api_client, client.ApiClient),
        "deferred": [name for name in ("kubernetes", "kubernetes.client", "kubernetes.config")
                     if is_deferred(name)],
    }
    # evictd's own client keeps working next to the complete package.
    listed = build_api_client(kubeconfig).list_pods_page("spec.nodeName=" + node, limit=None, continue_token=None, max_bytes=1 << 26, timeout_s=10)[0]
    result["evictd_after_full"] = sorted(item["metadata"]["name"] for item in listed["items"])
    parts.watcher.stop()
    print(json.dumps(result))
"""

FULL_FIRST = """
    import json, sys
    import kubernetes
    from kubernetes import client
    from evictd.kube.client import build_api_client
    from evictd.kube.lean_import import is_deferred

    kubeconfig, node = sys.argv[1], sys.argv[2]
    api = build_api_client(kubeconfig)
    result = {
        "node": api.read_node(node, timeout_s=10)["metadata"]["name"],
        "pods": sorted(item["metadata"]["name"]
                       for item in api.list_pods_page("spec.nodeName=" + node, limit=None, continue_token=None, max_bytes=1 << 26, timeout_s=10)[0]["items"]),
        "deferred": is_deferred("kubernetes") or is_deferred("kubernetes.client"),
        "same_package": sys.modules["kubernetes"] is kubernetes and kubernetes.client is client,
        "core_v1": client.CoreV1Api.__name__,
    }
    print(json.dumps(result))
"""


def run_child(code: str, *args: str) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; return the JSON it prints (fails the test on any error)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def seed(apiserver: ApiServer) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(pod_manifest("web", node_name=NODE))
    apiserver.store.create_pod(pod_manifest("elsewhere", node_name="node-2"))


def evictd_config(tmp_path: Path, kubeconfig: Path) -> Path:
    path = tmp_path / "evictd.yaml"
    evictd = {"apiVersion": "evictd.io/v1alpha1", "kind": "EvictdConfiguration", "nodeName": NODE,
              "kubeconfig": str(kubeconfig), "stateDir": str(tmp_path / "state")}
    path.write_text(json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"})
                    + "\n---\n" + json.dumps(evictd) + "\n")
    return path


def test_cluster_parts_load_no_client_models_and_full_use_still_works(apiserver: ApiServer, tmp_path: Path) -> None:
    seed(apiserver)
    kubeconfig = apiserver.kubeconfig_path
    result = run_child(LEAN_FIRST, str(evictd_config(tmp_path, kubeconfig)), str(kubeconfig), NODE, ",".join(HEAVY))

    assert result["pods"] == ["web"]
    assert result["loaded"] == []
    assert result["kubernetes_init_ran"] is False
    assert result["deferred"] == ["kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils"]
    node = apiserver.store.get_node(NODE)
    assert node is not None
    written = sorted(c["type"] for c in node["status"]["conditions"] if c["status"] == "True")
    assert "EvictdMemoryPressure" in written
    assert result["full"] == {
        "true_conditions": written,
        "taints": ["evictd.io/memory-pressure"],
        "version": "37.0.2",
        "watch": "Watch",
        "pod_model": "V1Pod",
        "api_client_is_real": True,
        "deferred": [],
    }
    assert result["evictd_after_full"] == ["web"]


def test_kubernetes_imported_first_is_used_as_it_is(apiserver: ApiServer) -> None:
    seed(apiserver)
    result = run_child(FULL_FIRST, str(apiserver.kubeconfig_path), NODE)
    assert result == {"node": NODE, "pods": ["web"], "deferred": False, "same_package": True, "core_v1": "CoreV1Api"}


def test_the_credential_loaders_get_a_working_api_client_stand_in(apiserver: ApiServer) -> None:
    """kube_config binds `ApiClient` at import time (for OIDC refreshes and new_client_from_config): it must work."""
    seed(apiserver)
    code = """
        import json, sys
        from evictd.kube.lean_import import ApiClientOnFirstUse, import_module
        kube_config = import_module("kubernetes.config.kube_config")
        client_package = sys.modules["kubernetes.client"]
        result = {"bound": kube_config.ApiClient is ApiClientOnFirstUse,
                  "left_on_package": "ApiClient" in vars(client_package)}
        api_client = kube_config.new_client_from_config(config_file=sys.argv[1])
        from kubernetes.client import ApiClient, CoreV1Api
        result["real"] = isinstance(api_client, ApiClient)
        result["node"] = CoreV1Api(api_client).read_node(sys.argv[2]).metadata.name
        print(json.dumps(result))
    """
    result = run_child(code, str(apiserver.kubeconfig_path), NODE)
    assert result == {"bound": True, "left_on_package": False, "real": True, "node": NODE}


def test_the_kubeconfig_loader_gets_working_oidc_stand_ins() -> None:
    """kube_config binds `OAuth2Session` and `oauthlib` at import time for OIDC token refreshes: a refresh builds a
    real OAuth2Session (loading requests then) and its `except oauthlib.oauth2.rfc6749.errors...` clause names the
    real exception class.
    """
    code = """
        import json, sys
        from evictd.kube.lean_import import OAuth2SessionOnFirstUse, import_module, is_deferred
        kube_config = import_module("kubernetes.config.kube_config")
        result = {"bound": kube_config.OAuth2Session is OAuth2SessionOnFirstUse,
                  "left_on_package": "OAuth2Session" in vars(sys.modules["requests_oauthlib"]),
                  "loaded_before": sorted(name for name in ("requests", "oauthlib.oauth2.rfc6749") if name in sys.modules),
                  "deferred": [name for name in ("oauthlib.oauth2", "requests_oauthlib") if is_deferred(name)]}
        session = kube_config.OAuth2Session(client_id="evictd", token={"refresh_token": "r", "access_token": "a"},
                                            auto_refresh_url="https://issuer.example/token")
        from oauthlib.oauth2.rfc6749.errors import InvalidClientIdError
        from requests_oauthlib import OAuth2Session
        result["real_session"] = isinstance(session, OAuth2Session) and session.client_id == "evictd"
        result["except_clause"] = kube_config.oauthlib.oauth2.rfc6749.errors.InvalidClientIdError is InvalidClientIdError
        result["deferred_after"] = [name for name in ("oauthlib.oauth2", "requests_oauthlib") if is_deferred(name)]
        print(json.dumps(result))
    """
    result = run_child(code)
    assert result == {"bound": True, "left_on_package": False, "loaded_before": [],
                      "deferred": ["oauthlib.oauth2", "requests_oauthlib"], "real_session": True,
                      "except_clause": True, "deferred_after": []}


def test_threads_completing_the_package_at_once_all_get_it() -> None:
    code = """
        import json, threading
        from evictd.kube.lean_import import import_module
        import_module("kubernetes.client.rest")
        import kubernetes
        seen, start = [], threading.Barrier(8)

        def use():
            start.wait()
            seen.append((kubernetes.client.CoreV1Api.__name__, kubernetes.config.load_kube_config.__name__,
                         kubernetes.watch.Watch.__name__))

        threads = [threading.Thread(target=use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(json.dumps({"seen": len(seen), "distinct": sorted(set(map(tuple, seen)))}))
    """
    result = run_child(code)
    assert result == {"seen": 8, "distinct": [["CoreV1Api", "load_kube_config", "Watch"]]}
