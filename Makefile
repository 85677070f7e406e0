# Set-up is two commands: `make run` and `make test`. Both create .venv and install evictd into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint check-config system-deps clean

# Debian packages the real-component tests need, as binary:package: a real containerd with runc, a static
# busybox to build images from, systemd-analyze to verify the unit, mkfs.ext4/losetup for small filesystems,
# openssl for the test API server's certificates. Installed only when missing (CI machines start empty).
SYSTEM_DEPS := containerd:containerd runc:runc busybox:busybox-static ctr:containerd \
	systemd-analyze:systemd mkfs.ext4:e2fsprogs losetup:mount openssl:openssl
system-deps:
	@missing=""; for pair in $(SYSTEM_DEPS); do bin=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$bin >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# The main job: the eviction daemon observing this machine (a live view on a terminal, JSON logs otherwise).
run: $(STAMP)
	$(BIN)/evictd run --config config/kubelet-config.yaml

test: $(STAMP) system-deps
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check src tests
	$(BIN)/mypy

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

check-config: $(STAMP)
	$(BIN)/evictd check-config --config config/kubelet-config.yaml

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .hypothesis
