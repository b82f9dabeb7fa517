# The commands people type. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo demo-serve test check test-typescript lint-typescript test-fast fuzz chaos lint format docs bench services-up services-down promtool browser screenshots clean

venv: $(STAMP)

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q -e clients/python
	touch $(STAMP)

demo: venv
	$(BIN)/auditrec demo

# The demo, then the console on its audits: the simulator and every component keep running,
# the console at http://127.0.0.1:$(DEMO_PORT)/ui with a token printed once, until Ctrl-C.
DEMO_PORT ?= 8080
demo-serve: venv
	$(BIN)/auditrec demo --serve --port $(DEMO_PORT)

# The TypeScript client's pinned node_modules (its rule is below).
TS_MODULES := clients/typescript/node_modules/.package-lock.json

# The whole suite against real Kafka and PostgreSQL; a service test that cannot reach its
# service fails instead of skipping (and the tests of deploy/ fail without promtool, the
# console's browser tests without chromium). The tests run in TEST_WORKERS processes (each
# test keeps its own topics, database and files); those that restart a shared service
# (marked `serial`) run alone afterwards. Exit 5 (no test selected) is not a failure there.
TEST_WORKERS ?= 3
test: venv services-up promtool browser $(TS_MODULES)
	AUDITREC_REQUIRE_SERVICES=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not serial" $(PYTEST_ARGS)
	AUDITREC_REQUIRE_SERVICES=1 $(BIN)/python -m pytest -q -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(MAKE) test-typescript

# The inner loop, on every change (no services needed): lint, the pure core, and the
# contract suites of the ports on the embedded backend.
CHECK_TESTS ?= tests/statemachine tests/projections/test_sqlite_store.py tests/consumers/eventlog/test_sqlite_log.py
check: venv
	$(MAKE) lint
	$(BIN)/python -m pytest -q -n 2 -m "not kafka and not postgres and not slow" $(CHECK_TESTS)

# The TypeScript client's node_modules, as pinned in clients/typescript/package-lock.json
# (standardwebhooks and what it needs, TypeScript): `npm ci` again when the lock file changes.
$(TS_MODULES): clients/typescript/package-lock.json
	cd clients/typescript && npm ci --silent --no-audit --no-fund

# The TypeScript client's tests (Node >= 20): against a real `auditrec serve` from this venv.
test-typescript: venv $(TS_MODULES)
	cd clients/typescript && AUDITREC=$(CURDIR)/$(BIN)/auditrec node --test test/*.test.mjs

# The fuzz targets with a long profile (`make test` runs a short one).
FUZZ_EXAMPLES ?= 2000
fuzz: venv services-up
	AUDITREC_REQUIRE_SERVICES=1 AUDITREC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:randomly tests/fuzz

# The chaos test with a long profile (`make test` runs a short one): two `auditrec serve`
# SIGKILLed CHAOS_KILLS times, the broker and the database restarted; figures at the end
# (also in .auditrec/chaos-summary.txt).
CHAOS_AUDITS   ?= 2000
CHAOS_KILLS    ?= 20
CHAOS_RESTARTS ?= kafka,postgres
chaos: venv services-up
	mkdir -p .auditrec
	AUDITREC_REQUIRE_SERVICES=1 AUDITREC_CHAOS_AUDITS=$(CHAOS_AUDITS) AUDITREC_CHAOS_KILLS=$(CHAOS_KILLS) \
	AUDITREC_CHAOS_RESTARTS=$(CHAOS_RESTARTS) AUDITREC_CHAOS_SUMMARY=.auditrec/chaos-summary.txt \
	$(BIN)/python -m pytest -q -s -p no:randomly tests/chaos

# Without Kafka/PostgreSQL: their tests skip.
test-fast: venv
	$(BIN)/python -m pytest -q -m "not kafka and not postgres and not slow" $(PYTEST_ARGS)
	$(MAKE) test-typescript

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy statemachine projections consumers
	$(BIN)/mypy clients/python/auditrec_client
	$(MAKE) lint-typescript

# The TypeScript client's declarations, its type-level tests and the example Worker, checked
# by TypeScript (a dev dependency pinned in clients/typescript/package-lock.json).
lint-typescript: $(TS_MODULES)
	cd clients/typescript && npx tsc -p .

# The documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link fails. The
# reference pages' tables are made from the code by docs/hooks.py as it builds.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv services-up
	$(BIN)/python bench/sweep.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/decode.py
	$(BIN)/python bench/reconciler_group.py
	$(BIN)/python bench/lazy_path.py
	$(BIN)/python bench/restart.py
	$(BIN)/python bench/discovery.py
	$(BIN)/python bench/shared_budget.py
	$(BIN)/python bench/shared_budget.py --database-url postgresql://postgres@127.0.0.1:5432/postgres
	$(BIN)/python bench/on_demand_budget.py
	$(BIN)/python bench/judge.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/simulator_queue.py
	$(BIN)/python bench/detection.py

services-up:
	bash scripts/services.sh up

services-down:
	bash scripts/services.sh down

# Prometheus' promtool, for the tests of deploy/prometheus (Debian's prometheus package when
# missing; the package's server is not started).
promtool:
	bash scripts/services.sh promtool

# Debian's chromium and chromedriver, for the console's browser tests (apt-get when missing).
browser:
	bash scripts/services.sh browser

# The console's screenshots in docs/screenshots, taken by its layout test (embedded backends):
# the overview during an incident, at 1366 px and 400 px, an audit page, the dead letters.
screenshots: venv browser
	AUDITREC_REQUIRE_SERVICES=1 AUDITREC_SCREENSHOTS_DIR=docs/screenshots \
	$(BIN)/python -m pytest -q -p no:randomly "tests/consumers/api/ui/test_console_layout.py::test_every_page_fits_400_and_1366_px_and_the_overview_works_by_keyboard[sqlite]"

clean:
	rm -rf .auditrec .pytest_cache .mypy_cache .ruff_cache .hypothesis site
