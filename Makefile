# Every target creates the virtual environment when it is missing, so a fresh clone needs only `make run` / `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench bench-estimator mutate clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,plot,dask]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/posdiag stress fixtures/corpus_en.txt

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check posdiag tests benchmarks tools
	$(BIN)/ruff format --check posdiag tests benchmarks tools
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m benchmarks

bench-estimator: $(STAMP)
	$(BIN)/python -m benchmarks.estimator

# Mutation score of geometry, rope, bias and gate (tens of minutes; not part of `make test`).
# MUTATE_CHILDREN=2 uses two cores; docs/mutation.md lists the mutants judged equivalent.
mutate: $(STAMP)
	$(BIN)/python tools/mutate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache mutants
