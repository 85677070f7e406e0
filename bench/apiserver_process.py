"""The test API server (tests/kube/apiserver.py) in a process of its own, seeded with a synthetic node's pods.

    .venv/bin/python bench/apiserver_process.py FOLDER NODE_NAME PODS_JSON

Starts the server on 127.0.0.1 (HTTPS, fresh certificates under FOLDER), creates the Node NODE_NAME and the
pods of PODS_JSON (a JSON list of v1 Pod objects, stored as a scheduler and kubelet left them: UIDs and statuses
kept), prints one JSON line naming its credentials (`kubeconfig`: the client-certificate kubeconfig; `token`
and `ca`: the files of a service account, as the in-cluster loader reads them; `port`), and serves until its
stdin closes (the benchmark holds the other end, so the server never outlives it). Its own process, so that the
memory of the stand-in is not counted in the daemon's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KUBE_TEST_HELPERS = Path(__file__).resolve().parents[1] / "tests" / "kube"


def main() -> None:
    folder, node_name, pods_json = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    sys.path.insert(0, str(KUBE_TEST_HELPERS))
    from apiserver import ApiServer
    from kube_objects import node_manifest

    with ApiServer(folder) as server:
        server.store.create_node(node_manifest(node_name))
        for pod in json.loads(pods_json.read_text(encoding="utf-8")):
            server.store.create_pod(pod)
        print(json.dumps({"kubeconfig": str(server.kubeconfig_path), "token": str(server.token_path),
                          "ca": str(server.ca_path), "port": server.port}), flush=True)
        sys.stdin.read()  # until the benchmark closes the pipe (or exits)


if __name__ == "__main__":
    main()
