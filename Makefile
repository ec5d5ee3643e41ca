# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs kvplan (with its dev tools) the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit nbtest lab clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m kvplan budget --room 18.8GiB,17.6GiB,12.9GiB,16.4GiB --reserve 0.9GiB

test: lint unit nbtest

lint: $(STAMP)
	$(BIN)/ruff check kvplan tests benchmarks

unit: $(STAMP)
	$(BIN)/python -m pytest --doctest-modules kvplan tests

nbtest: $(STAMP)
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
		$(BIN)/python -m pytest --nbval-lax --nbval-current-env \
			--nbval-sanitize-with tests/nbval_sanitize.cfg notebooks/; \
	else echo "no notebooks yet"; fi

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
