# Set-up is two commands: `make run` and `make test`. Both create .venv and install evictd into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-cluster lint check-config system-deps uml-kernel clean

# Debian packages the real-component tests need, as binary:package: a real containerd with runc, a static
# busybox to build images from, systemd-analyze to verify the unit, mkfs.ext4/losetup for small filesystems,
# openssl for the test API server's certificates, Prometheus and promtool for the alert rules, the dashboard
# and the metrics (deploy/monitoring). Installed only when missing (CI machines start empty).
SYSTEM_DEPS := containerd:containerd runc:runc busybox:busybox-static ctr:containerd \
	systemd-analyze:systemd mkfs.ext4:e2fsprogs losetup:mount openssl:openssl \
	prometheus:prometheus promtool:prometheus
system-deps:
	@missing=""; for pair in $(SYSTEM_DEPS); do bin=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$bin >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# A user-mode Linux kernel that boots on this machine, in /var/tmp/evictd-uml (tests/uml/provision-uml.sh).
uml-kernel: system-deps
	tests/uml/provision-uml.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# The main job: the eviction daemon observing this machine (a live view on a terminal, JSON logs otherwise).
run: $(STAMP)
	$(BIN)/evictd run --config config/kubelet-config.yaml

# The cgroup v2 tier (tests/uml) runs here, in user-mode Linux guests. The real-cluster tier (tests marked
# real_cluster) is left out: it needs kube-apiserver and kubelet binaries.
test: $(STAMP) system-deps uml-kernel
	$(BIN)/python -m pytest -q -m "not real_cluster"
	$(BIN)/ruff check src tests
	$(BIN)/mypy

# The real-cluster tier (not part of `make test` or CI): a real kube-apiserver, kubelet and kube-controller-manager
# (Job and ReplicaSet controllers) v1.36.2 from the folder
# EVICTD_K8S_BIN, etcd from Debian's etcd-server package (fetched by the harness with `apt-get download` into
# /var/tmp/evictd-k8s-cache, unpacked, not installed), the private containerd of the CRI tests; started and
# stopped by the tests themselves (tests/cluster/real_cluster.py). Runs tests/cluster and the contract tests
# (tests/contract) against that cluster.
CLUSTER_TEST_DIRS := $(wildcard tests/cluster tests/contract)
test-cluster: $(STAMP) system-deps uml-kernel
	@if [ -z "$$EVICTD_K8S_BIN" ] || [ ! -x "$$EVICTD_K8S_BIN/kube-apiserver" ] || [ ! -x "$$EVICTD_K8S_BIN/kubelet" ] \
			|| [ ! -x "$$EVICTD_K8S_BIN/kube-controller-manager" ]; then \
		echo "make test-cluster needs kube-apiserver, kubelet and kube-controller-manager v1.36.2 in the folder EVICTD_K8S_BIN (now: '$$EVICTD_K8S_BIN')." >&2; \
		echo "Get the official release binaries into a folder:" >&2; \
		for b in kube-apiserver kubelet kube-controller-manager; do \
			echo "  curl -fLO https://dl.k8s.io/release/v1.36.2/bin/linux/amd64/$$b" >&2; done; \
		echo "  chmod +x kube-apiserver kubelet kube-controller-manager" >&2; \
		echo "then run: EVICTD_K8S_BIN=/that/folder make test-cluster" >&2; \
		exit 2; \
	fi
	@command -v apt-get >/dev/null && command -v dpkg >/dev/null && command -v unshare >/dev/null || \
		{ echo "make test-cluster needs apt-get and dpkg (etcd comes from Debian's etcd-server) and unshare" >&2; exit 2; }
	EVICTD_CLUSTER=real $(BIN)/python -m pytest -q $(CLUSTER_TEST_DIRS)

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

check-config: $(STAMP)
	$(BIN)/evictd check-config --config config/kubelet-config.yaml

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .hypothesis
