# researchkit — the two commands: `make reproduce` and `make test` (README.md).
SHELL := /bin/bash
VENV  := .venv/bin
STUDIES ?= $(shell ls params | grep -v '^testbeds$$')
PROFILE ?= quick
TESTBED ?= local

.PHONY: setup reproduce test test-fast export-check nbdev-test docs bench doctor report clean-leaks

setup:                       ## install what is missing (Debian packages, .venv)
	@tools/bootstrap

reproduce: setup             ## reproduce every study on this testbed with the quick profile, write figures/
	@for s in $(STUDIES); do $(VENV)/researchkit run $$s --profile $(PROFILE) --testbed $(TESTBED) || exit 1; done
	$(VENV)/researchkit report

# the suite's workers: one more than the cores, since its tests wait on networks, servers and clusters about half the time
# (2 workers on 2 cores: user + sys CPU 23 min in a 23-min run); `exclusive` tests still run alone (tests/conftest.py)
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

test: setup export-check     ## everything CI runs (the files on TEST_WORKERS workers: tests/conftest.py says what stays alone; the library notebooks are tests/test_library_notebooks.py)
	$(VENV)/pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

export-check:                ## researchkit/ must be exactly what nbs/ exports
	@$(VENV)/nbdev-export
	@if [ -n "$$(git status --porcelain -- researchkit)" ]; then \
	  echo "nbdev-export changed researchkit/ — edit the notebooks in nbs/, not researchkit/:"; git status --porcelain -- researchkit; exit 1; fi

nbdev-test:                  ## the examples and tests under the code in the library notebooks
	$(VENV)/nbdev-test --skip-folder-re '^(studies|[_.].*)$$'

docs: setup                  ## the documentation site from the notebooks into _docs/ (tools/build-docs: nbconvert, standing in for Quarto)
	$(VENV)/python tools/build-docs _docs

bench: setup                 ## harness, data-path and container-runtime costs, as ratios measured in one run (run alone)
	$(VENV)/python bench/variance.py
	$(VENV)/python bench/harness.py
	$(VENV)/python bench/runtimes.py
	$(VENV)/python bench/policy.py
	$(VENV)/python bench/monitor.py
	$(VENV)/python bench/ledger.py
	$(VENV)/python bench/erasure.py

doctor: setup
	$(VENV)/researchkit doctor --testbed $(TESTBED)

report: setup
	$(VENV)/researchkit report

clean-leaks: setup           ## tear down what a crashed run left behind
	$(VENV)/researchkit cleanup
