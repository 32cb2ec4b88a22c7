# Two commands for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
HASH   := $(shell md5sum pyproject.toml | cut -c1-12)
RUN_STAMP  := $(VENV)/.run-$(HASH)
TEST_STAMP := $(VENV)/.test-$(HASH)
JMS_CLIENT := tests/jms/target/shoal-jms.jar
APT    := DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0

.PHONY: run test install compile sysdeps bench clean spark-cluster zookeeper zookeeper-stop

install: $(TEST_STAMP)

# `make run` installs only what `shoal serve` needs (and uvloop, its optional
# speed-up); `make test` adds the test, Spark, bench and cluster extras.
$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[fast]'
	rm -f $(VENV)/.run-*
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[fast,test,spark,bench,cluster]'
	rm -f $(VENV)/.test-*
	touch $@

# Debian packages the tests use: Java for Spark, a JDK and Maven for the Qpid
# JMS client (tests/jms) and Apache Artemis (from Maven Central), ActiveMQ 5.17 for the
# side-by-side tests, Chromium for the console test, node and npm for the
# @stomp/stompjs WebSocket test, ZooKeeper for the cluster tests (the
# fixtures start their own servers in temp dirs), openssl for the TLS tests'
# certificates, mount, mkfs.ext4 and fsfreeze for the durability tests' file
# systems. Installed only when missing.
sysdeps:
	@missing=""; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	dpkg -s activemq >/dev/null 2>&1 || missing="$$missing activemq"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	test -f /usr/share/java/zookeeper.jar || missing="$$missing zookeeper"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	PATH="$$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null || missing="$$missing e2fsprogs"; \
	PATH="$$PATH:/usr/sbin:/sbin" command -v fsfreeze >/dev/null || missing="$$missing util-linux"; \
	command -v mount >/dev/null || missing="$$missing mount"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(APT) update >/dev/null && $(APT) install --no-install-recommends $$missing >/dev/null; \
	fi

# The console pictures in docs/ (README, docs/cluster.md), taken by the
# browser tests; other runs keep them in the tests' temp dirs.
.PHONY: screenshots
screenshots: $(TEST_STAMP) compile sysdeps
	$(PY) -m pytest -q -p no:cacheprovider --screenshots docs \
		tests/management/test_console_browser.py tests/cluster/test_console_cluster.py

# `make run` serves the compiled build, the one README's figures describe:
# it compiles first (`make compile`; nothing to do once built). If the
# compile fails, the pure-Python build is served and the ready line says so.
run: $(RUN_STAMP)
	@$(MAKE) --no-print-directory compile || echo "make run: the compile failed (above);" \
		"serving the pure-Python build, which is slower (the ready line names the build)"
	$(VENV)/bin/shoal serve

# The compiled hot path (setup.py, src/shoal/_native.py): mypyc builds the
# modules in place, beside their sources, and Cython the module that calls
# Proton's C functions (protocol/amqp/_proton_calls.pyx). Rebuilt when a broker, STOMP, AMQP,
# STOMP session, sync pipeline, journal or records source changes; `import shoal` runs the pure modules (with a warning) while
# a build is stale. SHOAL_COMPILE=1: a failed compile is an error here.
NATIVE_BUILD := src/shoal/_native_build.json
compile: $(NATIVE_BUILD)
$(NATIVE_BUILD): $(RUN_STAMP) setup.py src/shoal/_native.py \
		$(wildcard src/shoal/protocol/stomp/*.py src/shoal/protocol/amqp/*.py src/shoal/protocol/amqp/*.pyx src/shoal/server/amqp_mapping.py src/shoal/broker/*.py) \
		src/shoal/server/pacing.py src/shoal/server/stomp.py src/shoal/server/carry_out.py src/shoal/server/persistence.py src/shoal/server/uring.py \
		src/shoal/store/replay_fold.py src/shoal/store/journal/writer.py \
		src/shoal/store/journal/codec.py src/shoal/records.py
	$(PY) -m pip install -q --disable-pip-version-check 'setuptools>=68' 'mypy>=1.11,<3' 'cython>=3.1,<4'
	SHOAL_COMPILE=1 $(PY) setup.py -q build_ext --inplace

# Lint and type-check first: they take seconds, the suite takes minutes. The
# suite runs on the compiled build, then the unit and property tests again on
# the pure-Python modules (SHOAL_EXPECT_IMPL: tests/protocol/test_native.py
# fails if a run loads the other implementation), then the durability tests
# with every journal sync on the worker thread (no io_uring, as some hosts run).
test: $(TEST_STAMP) compile sysdeps tests/ws/node_modules tests/amqp/node_modules $(JMS_CLIENT)
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench
	$(PY) -m mypy
	SHOAL_EXPECT_IMPL=compiled $(PY) -m pytest -q -p no:cacheprovider
	SHOAL_PURE=1 SHOAL_EXPECT_IMPL=pure $(PY) -m pytest -q -p no:cacheprovider \
		tests/protocol tests/broker tests/property tests/store \
		tests/server
	SHOAL_IO_URING=0 $(PY) -m pytest -q -p no:cacheprovider \
		tests/server/test_persistence.py tests/e2e/test_durability.py

# The Qpid JMS client of tests/jms (Maven, at the versions its pom.xml pins; the
# downloads are cached in ~/.m2).
$(JMS_CLIENT): tests/jms/pom.xml $(wildcard tests/jms/src/main/java/shoal/interop/*.java)
	cd tests/jms && mvn -B -q package
	touch $@

# @stomp/stompjs and ws for tests/ws, at the versions package-lock.json pins.
tests/ws/node_modules: tests/ws/package.json tests/ws/package-lock.json
	cd tests/ws && npm ci --no-audit --no-fund
	touch $@

# rhea (AMQP 1.0 for Node.js) for tests/amqp, at the version package-lock.json pins.
tests/amqp/node_modules: tests/amqp/package.json tests/amqp/package-lock.json
	cd tests/amqp && npm ci --no-audit --no-fund
	touch $@

# The connection-churn stress test (tests/e2e/test_stress.py) at length:
# STRESS_RUNS runs of STRESS_SECONDS each per build, stopping at the first
# failure (a broker that died by a signal shows its faulthandler dump).
STRESS_RUNS ?= 10
STRESS_SECONDS ?= 120
.PHONY: stress
stress: $(TEST_STAMP) compile
	for i in $$(seq $(STRESS_RUNS)); do \
		echo "stress run $$i of $(STRESS_RUNS)"; \
		SHOAL_STRESS_SECONDS=$(STRESS_SECONDS) $(PY) -m pytest -q -s -p no:cacheprovider \
			tests/e2e/test_stress.py || exit 1; \
	done

bench: $(TEST_STAMP) sysdeps
	@command -v rabbitmq-server >/dev/null || $(APT) install --no-install-recommends rabbitmq-server >/dev/null
	$(PY) -m bench.run --all

# A Spark standalone master and two workers on 127.0.0.1 (docs/spark.md); Ctrl-C stops them.
spark-cluster: $(TEST_STAMP)
	$(PY) -m shoal.spark.cluster --workers 2

clean:
	rm -rf $(VENV) data build src/*.egg-info tests/ws/node_modules tests/amqp/node_modules
	find src -name '*.so' -delete; rm -f $(NATIVE_BUILD)

# A standalone ZooKeeper for a cluster on this machine (docs/cluster.md):
# client port 2181 on loopback, data and log in ./data/zookeeper. It returns
# once ZooKeeper answers and leaves it running; `make zookeeper-stop` ends it.
# Installs only what it needs when missing: the cluster extra (kazoo) and
# Debian's zookeeper package (which brings Java).
zookeeper: $(RUN_STAMP)
	@$(PY) -c 'import kazoo' 2>/dev/null || \
		$(PY) -m pip install -q --disable-pip-version-check -e '.[fast,cluster]'
	@test -f /usr/share/java/zookeeper.jar || { echo "installing Debian's zookeeper"; \
		$(APT) update >/dev/null && $(APT) install --no-install-recommends zookeeper >/dev/null; }
	$(PY) -m shoal.server.cluster.zkserver --port 2181 --data data/zookeeper --detach

zookeeper-stop:
	$(PY) -m shoal.server.cluster.zkserver --data data/zookeeper --stop
