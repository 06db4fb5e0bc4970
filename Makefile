# autorecovery: make demo | make test | make proto | make bench
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit test-integration lint proto zookeeper venv bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian's zookeeper package (and an SLF4J backend so ZooKeeper's own log is not silent), and Debian's
# prometheus package (promtool tests the alert rules; a real Prometheus scrapes live daemons in a test).
zookeeper:
	@if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null || ! command -v promtool >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq zookeeper libslf4j-java prometheus >/dev/null; \
	fi
	@test -f /usr/share/java/zookeeper.jar && echo "zookeeper: /usr/share/java/zookeeper.jar"
	@command -v promtool >/dev/null && echo "prometheus: $$(command -v prometheus)"

proto: venv
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. \
	  proto/autorecovery/proto/bookie.proto proto/autorecovery/proto/bookkeeper_formats.proto
	rm -f autorecovery/proto/bookkeeper_formats_pb2_grpc.py

demo: venv zookeeper
	$(BIN)/python -m autorecovery demo

test: venv zookeeper
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

# ruff (pyflakes rules), mypy on the PURE packages, and the import-linter layers contract (.importlinter:
# pure < edge < roles < admin < cli)
lint: venv
	$(BIN)/ruff check autorecovery tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

bench: venv zookeeper
	$(BIN)/python bench/placement.py --quick
	$(BIN)/python bench/bookie_throughput.py --quick

clean:
	rm -rf $(VENV) .cluster build *.egg-info
