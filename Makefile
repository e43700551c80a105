# Every target creates the virtual environment when it is missing, so a fresh clone needs only `make run` / `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench bench-estimator clean

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
	$(BIN)/ruff check posdiag tests benchmarks
	$(BIN)/ruff format --check posdiag tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m benchmarks

bench-estimator: $(STAMP)
	$(BIN)/python -m benchmarks.estimator

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
