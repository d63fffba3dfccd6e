# Two commands do everything: `make run` (the whole workflow) and `make test` (the test suite).
# Both create .venv when it is missing and install the pinned dependencies into it.
# On a CUDA machine: `make run TORCH=torch==2.11.0` (the CUDA build that ships with Triton 3.6.0).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
CORES ?= all
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: install run test test-compile test-pandas3 verify report lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev,slurm]"
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/snakemake --cores $(CORES)

test: install  # the test suite on every core, its slowest tests named (docs/testing.md), then the linters
	$(BIN)/python -m pytest -n auto --dist worksteal --durations=25
	$(MAKE) --no-print-directory lint

# The comparison's tests under pandas 3, as on the GPU machine (requirements/cuda-h200.txt); the venv
# keeps pandas 2 (the slurm plugin needs pandas < 3): pandas 3 alone, on the venv's numpy, goes into
# an overlay first on PYTHONPATH.
PANDAS3 := $(VENV)/pandas3
test-pandas3: install
	test -f $(PANDAS3)/.installed || { $(BIN)/python -m pip install --quiet --no-deps --target $(PANDAS3) \
		"pandas>=3,<3.1" && touch $(PANDAS3)/.installed; }
	PYTHONPATH=$(abspath $(PANDAS3)) $(BIN)/python -c "import pandas, sys; \
		sys.exit(0 if pandas.__version__.startswith('3.') else f'pandas {pandas.__version__}, not 3')"
	PYTHONPATH=$(abspath $(PANDAS3)) $(BIN)/python -m pytest -n auto -p no:cacheprovider tests/test_compare*.py

# The tests that compile kernels for sm_80-sm_90 through Triton's ptxas (marked `compiles`, skipped by
# `make test`): the SASS digests against tests/data/kernel_digests.csv, the compile reports.
test-compile: install
	MINIMODEL_COMPILE=1 $(BIN)/python -m pytest -n auto -p no:cacheprovider -m compiles

verify: install
	$(BIN)/python -m minimodel verify results

report: install
	$(BIN)/snakemake --report results/report.html

lint: install
	$(BIN)/snakemake --lint
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check workflow

clean:  # everything the workflow wrote, except the committed reference runs
	find results -mindepth 1 -maxdepth 1 ! -name reference -exec rm -rf {} +
	rm -rf .snakemake
