# Two commands do all setup: `make plan` (plan the default workload) and `make test`.
# Both create .venv and install on first use, and take seconds once installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0
FBGEMM := fbgemm-gpu-cpu==1.8.0
TORCHREC := torchrec==1.8.0
WORKLOAD ?= configs/h100-16.yaml

.PHONY: setup plan test clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(TORCH) $(FBGEMM)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[cpu,torchrec,test,bench]'
	# torchrec's metadata pins the CUDA fbgemm-gpu; its real needs are the [torchrec] extra.
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps $(TORCHREC)
	touch $(STAMP)

setup: $(STAMP)

plan: $(STAMP)
	$(BIN)/shardopt plan $(WORKLOAD) -o plans/$(notdir $(basename $(WORKLOAD))).json

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) plans .pytest_cache .hypothesis
