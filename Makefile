# autorecovery: make demo | make test | make proto | make bench | make lock
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Lock files (generated from pyproject.toml by `make lock`, committed): every transitive dependency pinned
# with its hashes. runtime.txt: the package's dependencies (the Docker image installs it); test.txt: the
# test and dev extras on top, constrained to the same runtime versions (the venv below, and so CI).
RUNTIME_LOCK := requirements/runtime.txt
TEST_LOCK := requirements/test.txt
# uv (Astral; maintained, and the lock's generator), pinned; installed into its own small venv
UV_VERSION := 0.13.9
LOCK_TOOLS := .lock-tools
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform linux --custom-compile-command 'make lock' --quiet

.PHONY: demo test test-unit test-integration lint proto zookeeper chromium upstream venv bench clean dashboard lock chaos chaos-deps chaos-full chaos-stock-full helm

venv: $(STAMP)

# the venv follows the test lock: dependencies with --require-hashes, then our package with --no-deps
$(STAMP): pyproject.toml $(RUNTIME_LOCK) $(TEST_LOCK)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r $(TEST_LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# Regenerate both lock files from pyproject.toml (versions already locked are kept unless pyproject.toml
# asks otherwise; tests/unit/test_lock_files.py fails while a lock is stale).
lock:
	$(PY) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)
	$(LOCK_TOOLS)/bin/uv pip compile pyproject.toml $(LOCK_FLAGS) -o $(RUNTIME_LOCK)
	$(LOCK_TOOLS)/bin/uv pip compile pyproject.toml --extra test -c $(RUNTIME_LOCK) $(LOCK_FLAGS) -o $(TEST_LOCK)

# Debian's zookeeper package (and an SLF4J backend so ZooKeeper's own log is not silent), Debian's
# prometheus package (promtool tests the alert rules; a real Prometheus scrapes live daemons in a test)
# and prometheus-alertmanager (amtool checks deploy/prometheus/alertmanager.yml).
zookeeper:
	@if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null || ! command -v promtool >/dev/null \
	    || ! command -v amtool >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq zookeeper libslf4j-java prometheus prometheus-alertmanager >/dev/null; \
	fi
	@test -f /usr/share/java/zookeeper.jar && echo "zookeeper: /usr/share/java/zookeeper.jar"
	@command -v promtool >/dev/null && echo "prometheus: $$(command -v prometheus)"
	@command -v amtool >/dev/null && echo "alertmanager: $$(command -v amtool)"

# helm (pinned; built from the Go module proxy with the machine's Go into .tools/, gitignored, and built
# again only when missing): tests/unit/test_helm_chart.py renders deploy/helm/autorecovery with it.
HELM_VERSION := v3.22.0
# the Kubernetes version helm assumes without --kube-version: its release build's (from its k8s.io/client-go
# v0.37), set the way its own Makefile sets it
HELM_K8S_MINOR := 37
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
  $(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))
TOOLS := .tools
HELM := $(TOOLS)/helm

helm: $(HELM)

$(HELM):
	GOBIN=$(CURDIR)/$(TOOLS) GOFLAGS=-buildvcs=false go install -ldflags "$(HELM_LDFLAGS)" \
	  helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	@$(HELM) version --short

# Debian's chromium: tests/integration/test_reports_page.py opens report.html in headless Chromium
# (screenshot, rendered DOM) and checks the figures on the page equal summary.json.
chromium:
	@if ! command -v chromium >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi
	@command -v chromium >/dev/null && echo "chromium: $$(command -v chromium)"

# Stock Apache BookKeeper (interop/pom.xml, from Maven Central) for the interop tests: its jars in
# .upstream/lib/ (fetched again only when the pom changes) and our Java test client (interop/java/)
# compiled against them into .upstream/classes/. Needs Maven and a JDK (installed from Debian if missing).
UPSTREAM := .upstream
UPSTREAM_LIB_STAMP := $(UPSTREAM)/lib/.fetched
UPSTREAM_CLASSES_STAMP := $(UPSTREAM)/classes/.compiled
INTEROP_JAVA := $(shell find interop/java -name '*.java' 2>/dev/null)
# native jars for other platforms (netty-tcnative, epoll, io_uring): the JVM here never loads them
UPSTREAM_ARCH := $(subst aarch64,aarch_64,$(shell uname -m))

upstream: $(UPSTREAM_CLASSES_STAMP)

$(UPSTREAM_LIB_STAMP): interop/pom.xml
	@if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq maven default-jdk-headless >/dev/null; \
	fi
	rm -rf $(UPSTREAM)/lib
	mvn -B -q -Dstyle.color=never -f interop/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(UPSTREAM)/lib
	find $(UPSTREAM)/lib \( -name '*-osx-*.jar' -o -name '*-windows-*.jar' -o \( -name '*-linux-*.jar' ! -name '*-linux-$(UPSTREAM_ARCH).jar' \) \) -delete
	touch $@

$(UPSTREAM_CLASSES_STAMP): $(UPSTREAM_LIB_STAMP) $(INTEROP_JAVA)
	rm -rf $(UPSTREAM)/classes
	javac -nowarn -cp '$(UPSTREAM)/lib/*' -d $(UPSTREAM)/classes $(INTEROP_JAVA)
	touch $@

proto: venv
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. \
	  proto/autorecovery/proto/bookie.proto proto/autorecovery/proto/bookkeeper_formats.proto \
	  proto/autorecovery/proto/bookkeeper_protocol.proto
	rm -f autorecovery/proto/bookkeeper_formats_pb2_grpc.py autorecovery/proto/bookkeeper_protocol_pb2_grpc.py

demo: venv zookeeper upstream
	$(BIN)/python -m autorecovery demo $(DEMO_ARGS)

test: venv zookeeper chromium upstream chaos-deps helm
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

# ruff, mypy over the whole package (pyproject.toml [tool.mypy]), and the import-linter layers contract (.importlinter:
# pure < edge < roles < admin < cli)
lint: venv
	$(BIN)/ruff check autorecovery tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# the Grafana dashboard, generated (autorecovery/deploy/dashboard.py); tests/unit/test_dashboard.py fails
# when the committed JSON differs from the generator's output
dashboard: venv
	$(BIN)/python -m autorecovery.deploy.dashboard -o deploy/grafana/dashboards/autorecovery.json

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

bench: venv zookeeper
	$(BIN)/python bench/placement.py --quick
	$(BIN)/python bench/bookie_throughput.py --quick

clean:
	rm -rf $(VENV) .cluster build *.egg-info $(UPSTREAM) $(LOCK_TOOLS) $(TOOLS)

# A seeded fault campaign with its report (docs/chaos.md). Root for the namespace, nftables, tc and tmpfs
# faults (without root those kinds are skipped with the exact error).
CHAOS_ARGS ?= --seed 1 --faults 40 --duration 300
chaos: venv zookeeper chaos-deps
	$(BIN)/python bench/chaos.py $(CHAOS_ARGS)

# iproute2 (ip, tc) and nftables for the partition, one-way loss, asymmetric partition and slow-link faults.
# Idempotent, never prompts (CI=true, no stdin): installs only what is missing, as root or with passwordless sudo.
chaos-deps:
	@if command -v ip >/dev/null && command -v tc >/dev/null && command -v nft >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >/dev/null && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables </dev/null >/dev/null; \
	else echo "chaos-deps: not root, no passwordless sudo: iproute2/nftables not installed (their fault kinds are skipped)"; fi

# The full campaign (docs/chaos.md "Figures"): an hour of faults under writes (the soak; node 0 is never
# killed), network faults in a second lane, weighted towards faults that take seconds (over 1,000 in the
# hour on 2 shared cores; 2500 is only a cap); report in $(CHAOS_FULL_OUT).{txt,json}, exit 0 on a pass.
CHAOS_FULL_OUT ?= /tmp/chaos-full
CHAOS_FULL_KINDS ?= zk_conn_cut:3,one_way_loss:3,asymmetric_partition:3,partition_bookie_from_workers:2,partition_daemon_from_zk:1,daemon_netns_cut_zk:2,daemon_netns_cut_bookie:2,slow_link:2,slow_link_one_worker,bookie_kill9:2,bookie_sigstop,bookie_restart,bookie_torn_tail,daemon_kill9,auditor_kill9,daemon_sigstop,zk_leader_kill9,zk_follower_kill9,zk_quorum_loss,zk_rolling_restart,disk_full_during_copy
CHAOS_FULL_ARGS ?= --seed 26 --faults 2500 --duration 3600 --min-hold 0.3 --max-hold 1.5 --witness 0 --lanes 2 --settle 300 --disk-mb 1024
chaos-full: venv zookeeper chaos-deps
	@{ $(BIN)/python bench/chaos.py $(CHAOS_FULL_ARGS) --kinds $(CHAOS_FULL_KINDS) --json $(CHAOS_FULL_OUT).json; \
	  echo $$? >$(CHAOS_FULL_OUT).rc; } | tee $(CHAOS_FULL_OUT).txt; exit $$(cat $(CHAOS_FULL_OUT).rc)

# The hour on a stock cluster (docs/chaos.md "The stock cluster"): 6 Apache BookKeeper 4.17.2 Java bookies in 3
# racks, upstream's Java client writing, AutoRecoveryMain on node 5 beside our daemons, every kind that applies
# and the Java-only ones, the loopback network faults in a second lane and weighted towards them, as the full
# campaign does (>= 1,000 faults in the hour; 4000 is only a cap); report in $(CHAOS_STOCK_OUT).{txt,json}.
CHAOS_STOCK_OUT ?= /tmp/chaos-stock-full
CHAOS_STOCK_KINDS ?= zk_conn_cut:4,one_way_loss:4,partition_bookie_from_workers:4,partition_daemon_from_zk:3,bookie_kill9:2,bookie_sigstop,bookie_restart,daemon_kill9,auditor_kill9,daemon_sigstop,zk_leader_kill9,zk_follower_kill9,zk_quorum_loss,zk_rolling_restart,bookie_sigstop_short,bookie_rolling_restart,ledger_dir_full,journal_dir_full,bookie_empty_ledger_dir
CHAOS_STOCK_ARGS ?= --cluster stock --seed 40 --faults 4000 --duration 3600 --min-hold 0.3 --max-hold 1.5 --witness 0 --lanes 2 --settle 300 --disk-mb 512
chaos-stock-full: venv zookeeper upstream chaos-deps
	@{ $(BIN)/python bench/chaos.py $(CHAOS_STOCK_ARGS) --kinds $(CHAOS_STOCK_KINDS) --json $(CHAOS_STOCK_OUT).json; \
	  echo $$? >$(CHAOS_STOCK_OUT).rc; } | tee $(CHAOS_STOCK_OUT).txt; exit $$(cat $(CHAOS_STOCK_OUT).rc)
