# Two entry points: `make demo` and `make test`; `make check` is the quick tier of `make test`. All create .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

# What the processes make starts import is compiled once and cached in __pycache__, as Python does by default: the
# clone's own modules and the tests' assertion rewrites (the venv's are compiled at install). With
# PYTHONDONTWRITEBYTECODE set in the environment (as on CI) each of the suite's hundreds of processes (workers,
# producer children, Ray workers, CLI runs) would compile what it imports every time: measured 2-4x the import time
# (torch 1.65 -> 3.8 s of CPU, mlflow 1.5 -> 4.3 s; pytest's collection 18 -> 11 s per worker).
unexport PYTHONDONTWRITEBYTECODE

# Independent prerequisites build side by side: on a new machine the Go peers (CPU) beside the installs (network,
# disk). Output is not synchronised: make's sync (by target or by recipe line) would hold the suite's
# progress until pytest ends.
MAKEFLAGS += --jobs=2

.PHONY: demo test pytest check pytest-quick durations lint typecheck debian-packages peers peer-prometheus3 peer-otelcol peer-victoriametrics peer-vllm clean soak bench

# Without pip: the dev environment's link brings uv, and pip from the shared dev environment (peers/link_devenv.py);
# ensurepip took 3 of a new clone's 5 s before its first test. The demo's install bootstraps pip itself (below).
$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "otel-bridge needs Python 3.11+; set PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv --without-pip $(VENV)

# The installs go through uv (pinned, bootstrapped into the venv by pip): it resolves and downloads in parallel and
# links packages from its cache (~/.cache/uv, UV_CACHE_DIR moves it), so the dev extras' several GB (torch, ray,
# verl, mlflow) are downloaded once per machine and every later clone installs them in seconds (measured: pip 190 s
# a clone; uv 42 s cold, 10 s warm). Stamps record which extras are installed, so repeated runs skip the install.
# --compile-bytecode: uv leaves the installed modules uncompiled, and leaving it to the first process importing a module
# (above) was measured worse: the suite's first Ray workers, test processes and verl's trainer compiled torch, verl and
# the rest side by side, and test_verl_async's timing-sensitive sync failed in both runs that did it (cc12, cc13).
# Compiling takes 49 of a warm dev install's 57 s, so the dev extra's dependencies are compiled once per machine
# (below), not per clone.
UV_VERSION ?= 0.13.9
UV := $(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m ensurepip --default-pip >/dev/null
	$(PIP) install 'uv==$(UV_VERSION)'

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/uv
	$(UV) -e '.[tensorboard,plot]'
	@touch $@

# torch pinned to the version verl and the vLLM peer are tested with (PyPI's build: CUDA's libraries, run on the CPU).
TORCH ?= torch==2.13.0

# The dev extra's dependencies are not installed into the clone: they are the peer devenv (peers/build.sh), one
# environment per machine and set of requirements, compiled once, which the clone's venv sees through a .pth file
# with their scripts (peers/link_devenv.py). The clone installs otel-bridge alone, editable, in seconds. A venv that
# `make demo` filled first is made afresh: its own packages would shadow the shared ones.
DEVENV = PYTHON=$(PYTHON) UV_VERSION=$(UV_VERSION) TORCH='$(TORCH)' peers/build.sh

$(VENV)/.dev-installed: pyproject.toml peers/build.sh peers/link_devenv.py | $(BIN)/python
	$(DEVENV) devenv
	@if [ -e $(VENV)/.demo-installed ] && [ ! -e $@ ]; then echo "$(VENV): made afresh for the dev environment"; \
		rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV); fi
	$(BIN)/python peers/link_devenv.py "$$($(DEVENV) --dir devenv)"
	$(BIN)/uv pip install --python $(BIN)/python --quiet --no-deps -e .
	@touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(BIN)/otel-bridge demo

# The Debian packages the tests use, installed by one apt-get (make runs two jobs, and two apt-gets at once fail on
# dpkg's lock): `prometheus`, required (the integration tests' Prometheus 2.42 and promtool; PROMETHEUS_BIN names
# another binary), and `faketime`, wanted (libfaketime: tests/faults/test_clock_offset.py and the soak's part 7 move a
# trainer's clock against Prometheus'; without it they skip, saying why).
LIBFAKETIME := /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300

debian-packages:
	@need=""; want=""; faketime() { for f in $(LIBFAKETIME); do [ -e "$$f" ] && return 0; done; return 1; }; \
	if [ -z "$$PROMETHEUS_BIN" ] && ! command -v prometheus >/dev/null 2>&1; then need=prometheus; fi; \
	if ! faketime; then want=faketime; fi; \
	if [ -z "$$need$$want" ]; then exit 0; fi; \
	echo "installing the Debian packages: $$need $$want"; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		$(APT_GET) update && $(APT_GET) install -y --no-install-recommends $$need $$want >/dev/null; \
	else \
		echo "cannot install Debian packages here (needs root and apt-get)" >&2; \
	fi; \
	if [ -n "$$need" ] && ! command -v prometheus >/dev/null 2>&1; then \
		echo "error: no Prometheus: install it yourself (sudo apt-get install prometheus) or set PROMETHEUS_BIN=/path/to/prometheus." >&2; \
		exit 1; \
	fi; \
	if [ -n "$$want" ] && ! faketime; then \
		echo "warning: no libfaketime (sudo apt-get install faketime): the clock-offset tests will skip." >&2; \
	fi

# The peers: servers the tests talk to, built into a cache outside the clone, ~/.cache/otel-bridge/peers
# (OTEL_BRIDGE_PEERS moves it); rebuilt only when missing or when their recipe changed. Prometheus 3.16, the
# OpenTelemetry Collector distribution of collector/manifest.yaml and VictoriaMetrics from their Go modules (needs Go
# >= 1.26.7 and the Go module proxy); vLLM's CPU build from PyPI in its own venv (needs PYTHON 3.11-3.14). See
# peers/build.sh and docs/peers.md (what each is, build times).
peers: peer-prometheus3 peer-otelcol peer-victoriametrics peer-vllm

peer-prometheus3:
	peers/build.sh prometheus3

# Two lanes for make's two jobs: the Go builds one after another (each takes both cores), and beside them the
# downloads, the dev venv's and then vLLM's, which links the same torch from uv's cache.
peer-otelcol: | peer-prometheus3
	peers/build.sh otelcol

peer-victoriametrics: | peer-otelcol
	peers/build.sh victoriametrics

peer-vllm: | $(VENV)/.dev-installed
	$(DEVENV) vllm

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# mypy's cache is shared by the machine's clones, as the peers are: a clone without one starts from a copy of the last
# passed check's (a new clone's first check took 5.6 CPU-s, 0.3 with a cache; mypy checks every module against its
# hash, so another commit's cache costs only the modules that differ). Published by renaming a whole copy into place,
# never written into: checks side by side in two clones do not mix their files (docs/peers.md).
MYPY_SHARED ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/otel-bridge/mypy-cache

typecheck: $(VENV)/.dev-installed
	@if [ ! -d .mypy_cache ] && [ -d "$(MYPY_SHARED)" ]; then \
		cp -r "$(MYPY_SHARED)" .mypy_cache.$$$$ 2>/dev/null && mv -T .mypy_cache.$$$$ .mypy_cache || rm -rf .mypy_cache.$$$$; fi
	$(BIN)/mypy otel_bridge
	@mkdir -p "$(dir $(MYPY_SHARED))" && new="$(MYPY_SHARED).new.$$$$" old="$(MYPY_SHARED).old.$$$$" && \
		cp -r .mypy_cache "$$new" && { mv -T "$(MYPY_SHARED)" "$$old" 2>/dev/null; mv -T "$$new" "$(MYPY_SHARED)"; \
		rm -rf "$$new" "$$old"; }

# The suite runs in PYTEST_WORKERS processes (pytest-xdist): a module's tests stay in one worker, in order, and share its
# servers (tests/plugins/tiers.py); a test that saturates the machine on purpose (CPULoad) holds it whole meanwhile,
# so no other worker's test runs on it unplanned (tests/plugins/machine.py). `make test` writes the timings (per test,
# with each test's fixed sleeps) to .test-times/junit.xml and prints the 50 slowest. Four on 2 cores, the fourth held
# until the saturating tests are done (SATURATED_WORKERS, tests/plugins/tiers.py): most tests wait on wall-clock
# intervals (scrapes, steps, rule evaluations), not on the CPU (a two-worker run used 42% of the cores, three about
# 60%). Measured on fresh clones: three workers 22-24 minutes end to end, four 15m51s-19m46s (cc39-cc42).
PYTEST_WORKERS ?= 4
CHECK_WORKERS ?= 3
PYTEST_PARALLEL = --dist loadgroup --no-loadscope-reorder
TIMES := .test-times

# pytest runs beside lint and typecheck (make's second job): either fails `make test` all the same, and their CPU
# (mypy's, from a new clone's empty cache, mostly) costs a suite that mostly waits on wall-clock intervals little of its
# time, where before the suite waited for them.
test: pytest lint typecheck

pytest: $(VENV)/.dev-installed debian-packages peers
	@mkdir -p $(TIMES)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) $(PYTEST_PARALLEL) --junitxml=$(TIMES)/junit.xml --durations=50

# The per-test seconds of the last `make test`, committed so a fresh clone (CI's) hands out its longest groups first.
durations:
	$(BIN)/python -c 'from tests.plugins import tiers; tiers.write_durations()'

# The quick tier, for the edit-test loop: lint, types, import layers and the tests that need no server (no Prometheus,
# peer, collector or Ray: the marker `server` is set by rule, tests/plugins/tiers.py). Three workers, as `make test`:
# its tests are CPU-bound but wait on deadlines and subprocesses too (two workers left a quarter of the cores idle).
check: pytest-quick lint typecheck

pytest-quick: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -n $(CHECK_WORKERS) $(PYTEST_PARALLEL) -m 'not server'

clean:
	rm -rf $(VENV) runs .mypy_cache .ruff_cache .pytest_cache $(TIMES)

# 20,000 PromQL-path steps with periodic faults (RSS/threads/fds watched), then a trickling and a redirecting scrape
# target, a full disk under the JSONL tracker, SIGTERM at random points; delivered/expected per fault and backend.
# See soak/README.md; exits 1 when a check fails.
soak: $(VENV)/.dev-installed debian-packages
	$(BIN)/python -m soak.soak --steps 20000

# Benchmarks (not part of `make test`): writes bench/results/*.json and *.png; see bench/README.md.
bench: $(VENV)/.dev-installed debian-packages
	$(BIN)/python -m bench.run $(BENCH_ARGS)
