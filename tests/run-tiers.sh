#!/bin/sh
# `make test`'s tiers, timed: what runs side by side and what runs alone, and why (docs/development.md, "Test
# tiers"). Usage: tests/run-tiers.sh [PYTHON]   (default .venv/bin/python; run from the checkout's top)
#
#   1. parallel       every test but those marked serial or quiet_machine (and real_cluster, image or arena: their own
#                     targets), on pytest-xdist workers (one module
#                     per worker, so a module's guest or cluster is started once), its 25 slowest test phases
#                     listed (what to look at when the suite grows slow); ruff, mypy and mkdocs beside it at nice 19
#                     (a few CPU seconds in the workers' gaps);
#   2. alone          after it, one test at a time in one process, nothing beside: first the tests marked serial
#                     (they drive whole-machine memory with GiB hogs against MemAvailable: they cannot run beside
#                     each other, and beside them every latency that other tests assert stretches), then those
#                     marked quiet_machine (they compare whole-machine figures any other test moves:
#                     /proc/pressure/memory, MemAvailable within 512 MiB, the machine's task count), which the
#                     serial tests' half minute also gives time to settle after the workers.
#
# Every tier runs whatever an earlier one said; the exit status is 1 when any failed. Each tier's output is
# printed whole when it ends; the last lines are the time of each tier, the whole run's, and the test count.
set -u
PY=${1:-.venv/bin/python}
BIN=$(dirname "$PY")
# 4 on 2 cores: 6 ran the tier in 349 s once, but in a full run left a user-mode guest's crossing undecided
# (docs/development.md, "Test tiers").
WORKERS=${EVICTD_TEST_WORKERS:-4}
logs=$(mktemp -d "${TMPDIR:-/var/tmp}/evictd-tiers.XXXXXX")
trap 'rm -rf "$logs"' EXIT
now() { date +%s; }

# tier NAME COMMAND...: run COMMAND with its output in NAME.log; its status and seconds in NAME.rc and NAME.s.
tier() {
	name=$1; shift
	started=$(now)
	"$@" >"$logs/$name.log" 2>&1
	echo $? >"$logs/$name.rc"
	echo $(($(now) - started)) >"$logs/$name.s"
	echo "=== $name ($(cat "$logs/$name.s") s, exit $(cat "$logs/$name.rc")) ==="
	cat "$logs/$name.log"
}

begun=$(now)
(tier ruff nice -n 19 "$BIN/ruff" check src tests; tier mypy nice -n 19 "$BIN/mypy";
	tier mkdocs nice -n 19 "$BIN/mkdocs" build --strict --quiet) >"$logs/lint.out" &
lint=$!
tier parallel "$PY" -m pytest -q -p no:cacheprovider -n "$WORKERS" --dist loadfile --durations=25 \
	-m "not real_cluster and not image and not arena and not serial and not quiet_machine"
wait "$lint"
cat "$logs/lint.out"
# One process: the serial tests first, then the quiet_machine ones (tests/conftest.py orders them).
tier alone "$PY" -m pytest -q -p no:cacheprovider -m "(serial or quiet_machine) and not real_cluster and not image and not arena"
total=$(($(now) - begun))

status=0
passed=0
failed=0
echo
echo "make test tiers (tests/run-tiers.sh, $WORKERS workers):"
for name in parallel ruff mypy mkdocs alone; do
	rc=$(cat "$logs/$name.rc")
	[ "$rc" = 0 ] || status=1
	printf '  %-14s %4s s  exit %s\n' "$name" "$(cat "$logs/$name.s")" "$rc"
	# pytest's closing line, e.g. "3 failed, 3336 passed in 343.47s": its counts.
	closing=$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$logs/$name.log" | tail -n 1)
	for word in passed failed error errors; do
		n=$(printf '%s\n' "$closing" | grep -oE "[0-9]+ $word" | cut -d' ' -f1)
		case $word in
			passed) passed=$((passed + ${n:-0})) ;;
			*) failed=$((failed + ${n:-0})) ;;
		esac
	done
done
echo "make test total: $total s"
echo "tests: $passed passed, $failed failed"
exit $status
