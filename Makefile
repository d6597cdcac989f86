# outreach — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test chaos bench airflow venv clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "outreach needs Python 3.11, got " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

## Run the main job (import → queue → send) with real Airflow on the shipped sample data.
demo: venv
	$(BIN)/outreach demo

## Benchmark: the send path as a ratio against raw smtplib, measured in the same run.
bench: venv
	$(BIN)/python bench/bench_send.py $(or $(N),1000)

## Run Airflow as people run it (LocalExecutor, PostgreSQL metadata) until Ctrl-C.
airflow: venv
	$(BIN)/outreach airflow

## Run the test suite (real PostgreSQL, real aiosmtpd, real Airflow).
test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## Chaos: N SIGKILL iterations of real sender processes, then the invariant checker's totals.
N ?= 50
chaos: venv
	OUTREACH_CHAOS_ITERATIONS=$(N) $(BIN)/python -m pytest -q -s tests/test_chaos.py \
		-k sigkill -o log_cli=false 2>&1 | grep -E "chaos:|passed|failed|Error"

clean:
	rm -rf .outreach .airflow .airflow-deploy
