# outreach — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# apt-get waits for another apt-get (a second checkout installing Dovecot or chromium at the same
# time) instead of failing at once on the dpkg lock.
APT_WAIT := -o DPkg::Lock::Timeout=600

.PHONY: demo test test-fast bytecode lint docs chaos bench bench-inbound bench-venv airflow airflow-worker venv clean stop browser imap-server compose-tool redis
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "outreach needs Python 3.11, got " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

## The project's own modules compiled once (__pycache__/, ignored by git), as pip compiled the
## venv's: with PYTHONDONTWRITEBYTECODE set (some machines set it), every process compiled them
## again, ~0.9 CPU-s for one that imports the whole package; the suite starts hundreds (Airflow
## tasks, DAG parses, CLI calls). A file edited since is read from its source, as before
## (Python checks the source's time and size). A file that does not compile (or a folder that
## cannot be written) is left to the run that imports it, which names the error where it matters.
bytecode: venv
	$(BIN)/python -m compileall -qq -j 0 plugins dags bench tests || true

## Run the main job (import → queue → send) with real Airflow on the shipped sample data.
demo: venv bytecode
	$(BIN)/outreach demo

## The benchmarks' own venv: the runtime requirements plus the peers (bench/requirements.txt).
bench-venv: $(BENCH_STAMP)

$(BENCH_STAMP): requirements.txt bench/requirements.txt pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-r requirements.txt -r bench/requirements.txt
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BENCH_VENV)/bin/python -m pip check
	touch $(BENCH_STAMP)

## Benchmarks: each hot path against its raw baseline and the peers, in the same run; writes
## bench/results/latest.md. Sizes: make bench CLAIM_ROWS=100000 IMPORT_ROWS=1000000 REPEATS=5 …
CLAIM_ROWS ?= 10000
SEND_EMAILS ?= 300
IMPORT_ROWS ?= 100000
FANOUT_TASKS ?= 4
SCALEOUT_EMAILS ?= 200
REPEATS ?= 3
bench: bench-venv
	$(BENCH_VENV)/bin/python bench/run.py --claim-rows $(CLAIM_ROWS) --send-emails $(SEND_EMAILS) \
		--import-rows $(IMPORT_ROWS) --fanout-tasks $(FANOUT_TASKS) \
		--scaleout-emails $(SCALEOUT_EMAILS) --repeats $(REPEATS) $(BENCH_ARGS)

## Inbound classification scored against sisimai on its public corpus (issue 23): clone github
## sisimai/set-of-emails, then make bench-inbound CORPUS=…/set-of-emails/maildir/bsd; writes
## bench/results/inbound.md. Not part of `make test` (the corpus is not in this repository).
bench-inbound: venv
	@test -n "$(CORPUS)" || { echo "set CORPUS=/path/to/set-of-emails/maildir/bsd (a clone of github sisimai/set-of-emails)" >&2; exit 2; }
	$(BIN)/python bench/bench_inbound.py $(CORPUS)

## Run Airflow as people run it until Ctrl-C: LocalExecutor (embedded PostgreSQL unless configured),
## or EXECUTOR=celery WORKERS=N: the CeleryExecutor on OUTREACH_DATABASE_URL and REDIS_URL. A
## process that exits is started again (backoff); capacity by docs/reference/sizing.md.
EXECUTOR ?= local
WORKERS ?= 2
airflow: venv
	$(BIN)/outreach airflow --executor $(EXECUTOR) --workers $(WORKERS)

## More Celery workers for a running `make airflow EXECUTOR=celery` (here or on another machine
## with the same .env: docs/howto/celery-scale-out.md), supervised like it, until Ctrl-C.
airflow-worker: venv
	$(BIN)/outreach airflow worker --workers $(or $(EXTRA_WORKERS),1)

## Dovecot (Debian's dovecot-imapd), the real IMAP server the inbox tests and the demo start on
## loopback with their own config (never the system's): installed when missing, as root.
imap-server:
	@command -v dovecot >/dev/null 2>&1 || test -x /usr/sbin/dovecot || { \
		if [ "$$(id -u)" = 0 ]; then \
			DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) install -y -qq --no-install-recommends dovecot-imapd; \
		else echo "Dovecot is missing: sudo apt-get install dovecot-imapd (docs/tutorial/first-campaign.md)" >&2; exit 1; fi; }

## Debian's chromium and chromium-driver, the headless browser the campaign-page test drives
## (Selenium, never a downloaded browser): installed when missing, as root.
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then \
			DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) install -y -qq --no-install-recommends chromium chromium-driver; \
		else echo "chromium is missing: sudo apt-get install chromium chromium-driver (docs/tutorial/first-campaign.md)" >&2; exit 1; fi; }

## Debian's docker-compose, which tests/acceptance/test_compose.py runs to validate
## docker-compose.yaml (`docker-compose config`: no container engine): installed when missing, as root.
compose-tool:
	@command -v docker-compose >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then \
			DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) install -y -qq --no-install-recommends docker-compose; \
		else echo "docker-compose is missing: sudo apt-get install docker-compose" >&2; exit 1; fi; }

## Run the test suite (real PostgreSQL, real aiosmtpd, real Airflow, real Dovecot, real chromium)
## on every core: one pytest-xdist worker per core and two more (TEST_WORKERS=0: all in one
## process; the acceptance tests spend much of their time waiting on a deployment, and the extra
## workers fill that: on 2 cores 20:46 for -n 3 against 22:45 for -n 2 in one afternoon's runs,
## then 11:24 for -n 4 against 12:11 for -n 3, idle CPU 3 % against 9 %), tests
## sharing a module on one worker (loadfile); files go out in collection order (--no-loadscope-reorder:
## tests/acceptance and tests/dags, the longest, first; the short unit tests fill the end; xdist's
## default, most tests first, left the one-test deployments for last); prints the 15 slowest tests.
## docs/howto/run-the-tests.md: how long it takes, and how to run a part.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))
test: venv bytecode bench-venv imap-server browser compose-tool redis
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

## The Celery tests' broker: the machine's Redis on 127.0.0.1:6379 (the machine's own command),
## started when it is not running.
redis:
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes \
		--bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis \
		--logfile /var/log/redis/ci.log

## The inner loop: tests/unit, tests/integration and tests/migration without real Airflow (real
## PostgreSQL, aiosmtpd and Dovecot still); no DAG run, deployment, Celery, browser or chaos.
## 890 of the suite's 945 tests (2026-12-07; 355 and ~320 CPU-seconds when it was made), split
## over the cores like `make test`.
test-fast: venv bytecode imap-server
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not airflow" \
		tests/unit tests/integration tests/migration $(PYTEST_ARGS)

## Lint and types: ruff with pyproject.toml's [tool.ruff] rules, mypy on its [tool.mypy] files;
## what .ci/run runs before the tests.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

## The documentation site (mkdocs.yml): docs/, with the reference pages generated from the code
## (tools/docs_reference.py), built --strict (a broken link fails) into site/; what .ci/run builds.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

## Chaos: N SIGKILL iterations of real sender processes, then the invariant checker's totals.
N ?= 50
chaos: venv
	OUTREACH_CHAOS_ITERATIONS=$(N) $(BIN)/python -m pytest -q -s tests/acceptance/test_chaos.py \
		-k sigkill -o log_cli=false 2>&1 | grep -E "chaos:|passed|failed|Error"

## Stop the embedded PostgreSQL of .outreach/pgdata if it runs (whoever started it, root too).
stop: venv
	$(BIN)/outreach db stop

clean:
	if test -x $(BIN)/outreach; then $(BIN)/outreach db stop; fi
	rm -rf .outreach .airflow .airflow-deploy
