PYTHON ?= python3
CONFIG ?= dizoo/classic_control/cartpole/config/cartpole_dqn_config.py

.PHONY: install demo test test-fast lint bench proto

install:
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e '.[test]'

demo: install
	ding -m serial -c $(CONFIG) -s 0

# Lint, format, types and the import-layer contracts (pyproject.toml), then the whole suite.
lint: install
	$(PYTHON) -m ruff check ding dizoo tests benchmarks
	$(PYTHON) -m ruff format --check ding dizoo tests benchmarks
	$(PYTHON) -m mypy
	lint-imports

test: lint
	$(PYTHON) -m pytest -q -ra --durations=25

test-fast: install
	$(PYTHON) -m pytest -q -ra -m "not slow"

bench: install
	$(PYTHON) benchmarks/learner_overhead.py
	$(PYTHON) benchmarks/serial_cartpole.py
	$(PYTHON) benchmarks/collect_throughput.py
	$(PYTHON) benchmarks/parallel_cartpole.py

# The replay service's gRPC stubs (committed; regenerate after editing the .proto). Needs grpcio-tools.
proto:
	$(PYTHON) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
		ding/interaction/replay/v1/replay.proto
