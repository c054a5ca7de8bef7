# The two commands a fresh machine needs: `make run` (demo on SQLite, web + cluster) and
# `make test` (whole suite on PostgreSQL, then ruff and mypy).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/agentruns
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
# A marker expression both runs obey, e.g. PYTEST_MARKS="not slow".
PYTEST_MARKS ?=
MARKS_AND = $(if $(PYTEST_MARKS), and ($(PYTEST_MARKS)))

.PHONY: run test install postgres lint bench bench-cluster bench-scale bench-drivers \
  bench-scaleout host-tools bench-mcp interop

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

run: install
	env -u DATABASE_URL $(PY) manage.py migrate --noinput -v0
	env -u DATABASE_URL $(PY) manage.py demo_data
	$(PY) manage.py collectstatic --noinput -v0
	env -u DATABASE_URL $(PY) manage.py serve

postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || \
	  pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | sort -n | tail -1) main start
	@for i in $$(seq 1 60); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 0.5; done; \
	  echo "PostgreSQL did not come up on 127.0.0.1:5432" >&2; exit 1

test: install postgres host-tools
	@# The browser tests (tests/browser) drive Debian's Chromium, never a downloaded one.
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium chromium-driver)
	@# In a random order whose seed the header prints ("Using --randomly-seed=N"; replay
	@# with PYTEST_ARGS=--randomly-seed=N), on $(PYTEST_WORKERS) workers, a test database each.
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -n $(PYTEST_WORKERS) -m "not serial$(MARKS_AND)" \
	  --durations=25 $(PYTEST_ARGS)
	@# Alone, after the others: it restarts the PostgreSQL server every test database is on.
	@# (Exit status 5: PYTEST_MARKS selected none of them.)
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -m "serial$(MARKS_AND)" $(PYTEST_ARGS) || test $$? -eq 5
	@# The embedded default (SQLite) takes the portable write path: smoke it too.
	env -u DATABASE_URL AGENTRUNS_VAR_DIR=$$(mktemp -d) $(PY) -m pytest -q \
	  tests/loop/test_smoke.py tests/hitl/test_smoke.py
	$(MAKE) lint

# What simulating machines needs (bench-scaleout, tests/cluster's fault tests between
# machines): Debian's PgBouncer, libfaketime and iptables; `ip` comes with iproute2.
HOST_TOOLS := pgbouncer faketime iptables iproute2
host-tools:
	@command -v pgbouncer >/dev/null && command -v faketime >/dev/null && \
	  command -v iptables >/dev/null && command -v ip >/dev/null || \
	  (apt-get update && apt-get install -y --no-install-recommends $(HOST_TOOLS))

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=$(PG_URL) $(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports

# Benchmarks (SPEC §14) on databases of their own; the peers (LangGraph, DBOS) are installed
# into .venv-peers by the benchmark on first use, never as project dependencies.
BENCH_URL ?= postgres://postgres@127.0.0.1:5432/agentruns_bench
BENCH_SCALE_URL ?= $(BENCH_URL)_scale
BENCH_ARGS ?=

# $(call bench_db,URL): the database exists and is migrated.
define bench_db
	psql -q "$(dir $(1))postgres" -c 'CREATE DATABASE "$(notdir $(1))"' 2>/dev/null || true
	DATABASE_URL=$(1) $(PY) manage.py migrate --noinput -v0
endef

bench: install postgres
	$(call bench_db,$(BENCH_URL))
	DATABASE_URL=$(BENCH_URL) $(PY) manage.py bench $(BENCH_ARGS)

bench-cluster: install postgres
	$(call bench_db,$(BENCH_URL))
	DATABASE_URL=$(BENCH_URL) $(PY) manage.py bench_cluster $(BENCH_ARGS)

bench-drivers: install postgres
	$(call bench_db,$(BENCH_URL))
	DATABASE_URL=$(BENCH_URL) $(PY) manage.py bench_drivers $(BENCH_ARGS)

# PERF-12: 1..4 cluster hosts simulated here (network namespaces, CPU quotas, PgBouncer).
bench-scaleout: install postgres host-tools
	$(call bench_db,$(BENCH_URL))
	DATABASE_URL=$(BENCH_URL) $(PY) manage.py bench_scaleout $(BENCH_ARGS)

bench-scale: install postgres
	$(call bench_db,$(BENCH_SCALE_URL))
	DATABASE_URL=$(BENCH_SCALE_URL) $(PY) manage.py bench_scale $(BENCH_ARGS)

# PERF-11: an MCP call's overhead over stdio and streamable HTTP (BENCH_ARGS=--fresh: a
# new session per call, as before INT-4). No database.
bench-mcp: install
	env -u DATABASE_URL AGENTRUNS_VAR_DIR=$$(mktemp -d) $(PY) manage.py bench_mcp $(BENCH_ARGS)

# INT-1: a real round trip with llama-cpp-python's server and SmolLM2-135M (docs/operators.md,
# "Local models"); never part of `make test` or .ci/run. INTEROP_VENV, INTEROP_PORT.
interop: install
	bash .ci/interop
