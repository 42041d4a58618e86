# DECOR — the verbs. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV = $(shell bash hack/venv.sh)
PY = $(VENV)/bin/python

.PHONY: help venv test unit integration e2e demo trainer-wheel crds lint

help: ## list the verbs
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

venv: ## create or reuse the Python environment (cached outside the repo)
	@echo $(VENV)

# The unit tests run two at a time; the integration tests one at a time (their trainers are
# timed under real CPU quotas). Both run, whichever fails; the status is the first failure's.
test: ## unit + integration tests (no cluster needed)
	@rc=0; $(VENV)/bin/pytest -n 2 tests/unit --durations=10 || rc=$$?; \
	$(VENV)/bin/pytest tests/integration --durations=25 || { r=$$?; [ $$rc != 0 ] || rc=$$r; }; \
	exit $$rc

unit: ## unit tests only (fast)
	$(VENV)/bin/pytest -n 2 tests/unit

integration: ## integration tests: real training under a real CPU quota
	$(VENV)/bin/pytest tests/integration

e2e: ## end-to-end tests on the cluster in KUBECONFIG (make cluster-up first): concurrent lanes, then the tests that run alone
	bash cluster/e2e.sh

demo: ## run a reference training job to a 90 s deadline on this machine
	$(VENV)/bin/decor run examples/resnet-cpu.yaml --local --out decor-runs/demo

trainer-wheel: ## build the decor-trainer wheel into dist/ (pip install it into your training image)
	bash hack/trainer-wheel.sh dist

crds: ## copy the CRD (single source: crds/) into the chart
	cp crds/*.yaml helm/decor/crds/

lint: ## ruff + mypy + the import contract (.importlinter)
	$(VENV)/bin/ruff check operator trainer_image tests bench
	$(VENV)/bin/ruff format --check operator trainer_image tests bench
	MYPYPATH=operator:trainer_image $(VENV)/bin/mypy operator/decor bench  # bench against this checkout's decor
	$(VENV)/bin/mypy --python-version 3.10 trainer_image/decor_trainer  # decor-trainer supports 3.10
	PYTHONPATH=operator:trainer_image $(VENV)/bin/lint-imports

# Where `make install` links the commands: PREFIX/bin (override, e.g. make install PREFIX=~/.local).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
COMMANDS = decor kubectl-dtj

.PHONY: install uninstall

install: ## put decor and kubectl-dtj on PATH: links in PREFIX/bin (default /usr/local/bin) to the project venv
	@venv="$(VENV)"; test -n "$$venv" && test -x "$$venv/bin/decor" || { echo "no project venv (hack/venv.sh failed)" >&2; exit 1; }
	@mkdir -p "$(BINDIR)"
	@for c in $(COMMANDS); do ln -sfn "$(VENV)/bin/$$c" "$(BINDIR)/$$c" && echo "$(BINDIR)/$$c -> $(VENV)/bin/$$c"; done

uninstall: ## remove the links make install made
	@for c in $(COMMANDS); do \
	  if [ -L "$(BINDIR)/$$c" ]; then rm -f "$(BINDIR)/$$c" && echo "removed $(BINDIR)/$$c"; fi; \
	done

-include cluster/cluster.mk
-include bench/bench.mk
