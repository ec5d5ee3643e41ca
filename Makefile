# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs kvplan (with its dev tools) the first time.
# With a conda environment active (`conda activate kvplan`, CONDA_PREFIX set) that environment is used
# instead: kvplan is installed into it (editable, with its dev tools) once, and nothing else is created.
PYTHON ?= python3
ifdef CONDA_PREFIX
BIN := $(CONDA_PREFIX)/bin
STAMP := $(CONDA_PREFIX)/.kvplan-installed
else
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
endif

.PHONY: demo test lint unit nbtest browser-test fuzz lab review clean system-deps

# Debian packages `make test` needs, installed by `make system-deps` (which `make test` and `make demo` run
# first) when missing: as root with apt-get, otherwise it stops with the one-line command to run. Append
# yours here; never a browser or binary downloaded by a script. chromium: the browser test; prometheus (with
# promtool): the real Prometheus server the --prometheus tests backfill and start (tests/prometheus_server.py).
DEBIAN_PACKAGES := chromium prometheus
# The ones `make demo` needs (none: its report renders without a browser), so a demo asks for no root.
DEMO_DEBIAN_PACKAGES :=
demo: DEBIAN_PACKAGES = $(DEMO_DEBIAN_PACKAGES)

system-deps:
	@missing=$$(for package in $(DEBIAN_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' "$$package" 2>/dev/null | grep -q '^install ok installed' || echo "$$package"; \
	done | xargs); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages: $$missing (once)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "error: missing Debian packages: $$missing; install them with: sudo apt-get install -y $$missing"; \
		exit 2; \
	fi

# The first install says only what goes wrong: pip is quiet and the build's own warnings (setuptools'
# "Editable installation" notice) are not shown; pip's errors still are.
$(STAMP): pyproject.toml
ifndef CONDA_PREFIX
	@$(PYTHON) -m venv $(VENV)
	@PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet --upgrade pip
endif
	@echo "installing kvplan and its dev tools into $(BIN)/.. (once)"
	@PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e '.[dev]'
	@# kvplan's bytecode, as a regular pip install writes it (an editable one does not, and where
	@# PYTHONDONTWRITEBYTECODE is set Python never does): each kvplan command then starts about 0.1 s sooner
	@PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q kvplan
	@touch $(STAMP)

# `make demo` prints kvplan's own lines only: the budget of the sample boot, its approval into build/evidence/
# and the verification, then the report. The report (python -m kvplan.notebook.report) executes every notebook
# once into build/report/<name>.html (no code, charts as PNG files in <name>_files/) and
# build/report/code/<name>.html (with code, for auditors), and writes build/report/index.html, which opens
# with the verified bundle's decision. The report shows that bundle: its notebooks take it as BUNDLE and each
# page states its digest; 07 plans a fleet, not one bundle, and is not part of it.
REPORT := build/report
EVIDENCE := build/evidence
APPROVAL := data/boots/four-rank/boot.log --reserve 0.9GiB --model llama-3.1-70b --tp 4
BUNDLE_NOTEBOOKS := $(filter-out notebooks/07-%,$(wildcard notebooks/*.ipynb))

demo: system-deps $(STAMP)
	@$(BIN)/python -m kvplan budget $(APPROVAL)
	@# The demo's own bundle folder is rebuilt each run (an approval is never overwritten, so clear it first).
	@rm -rf $(EVIDENCE) $(REPORT)
	@$(BIN)/python -m kvplan approve $(APPROVAL) \
		--nvidia-smi data/boots/four-rank/nvidia-smi-gpu.csv --nvidia-smi data/boots/four-rank/nvidia-smi-apps.csv \
		--target-concurrency 4 --seq-len 32768 --approver "make demo" --note "sample four-rank boot" --out $(EVIDENCE)
	@$(BIN)/python -m kvplan verify $(EVIDENCE)/*
	@$(BIN)/python -m kvplan.notebook.report $(REPORT) $(EVIDENCE)/* $(BUNDLE_NOTEBOOKS)

test: system-deps lint unit nbtest browser-test

lint: $(STAMP)
	$(BIN)/ruff check kvplan tests benchmarks
	$(BIN)/ruff format --check kvplan tests benchmarks
	$(BIN)/mypy kvplan

unit: $(STAMP)
	$(BIN)/python -m pytest --doctest-modules kvplan tests

nbtest: $(STAMP)
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
		$(BIN)/python -m pytest --nbval-lax --nbval-current-env \
			--nbval-sanitize-with tests/nbval_sanitize.cfg notebooks/; \
	else echo "no notebooks yet"; fi

# The what-if panels in a real JupyterLab and Debian's Chromium (/usr/bin/chromium; `make system-deps`).
browser-test: system-deps $(STAMP)
	KVPLAN_BROWSER_TEST=1 $(BIN)/python -m pytest -p no:cacheprovider tests/test_browser_panels.py

# The long fuzz run (CI runs a bounded number of examples of the same targets in `make unit`). A verify
# example recomputes a whole bundle (about a second), so the verify fuzz has its own, smaller count, and so has
# the manifest fuzz (a manifest plans a fleet twice and approves its classes: about 5 s); -s prints their cases
# tried and held.
FUZZ_EXAMPLES ?= 5000
FUZZ_VERIFY_EXAMPLES ?= 400
FUZZ_MANIFEST_EXAMPLES ?= 200
fuzz: $(STAMP)
	KVPLAN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) KVPLAN_TAMPER_FULL=1 $(BIN)/python -m pytest -q \
		tests/test_fuzz_reader.py tests/test_fuzz_load.py tests/test_tamper.py
	KVPLAN_FUZZ_EXAMPLES=$(FUZZ_VERIFY_EXAMPLES) $(BIN)/python -m pytest -q -s tests/test_fuzz_verify.py
	KVPLAN_FUZZ_EXAMPLES=$(FUZZ_MANIFEST_EXAMPLES) $(BIN)/python -m pytest -q -s tests/test_fuzz_manifest.py
	KVPLAN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -s tests/test_fuzz_text.py

# JupyterLab refuses to run as root (containers, devcontainers) unless told to.
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(BIN)/jupyter lab $(LAB_FLAGS) notebooks/

# Review mode: every notebook as a live dashboard (Voilà: code hidden, what-if panels move) on 127.0.0.1,
# port REVIEW_PORT; its first page is the decision of `make demo`'s verified bundle, with a link to each
# dashboard. Ctrl-C stops it.
REVIEW_PORT ?= 8866
review: demo
	@$(BIN)/python -m kvplan.notebook.report build/review $(EVIDENCE)/* notebooks/*.ipynb --serve --port $(REVIEW_PORT)

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis .mypy_cache
