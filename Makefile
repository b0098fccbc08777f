# The two commands of README.md. Each bootstraps what it needs (a venv in .venv, the
# package with its C library, cached Kubernetes binaries) and is quick when warm.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml setup.py $(wildcard fakegpu/nvml/csrc/*) $(wildcard fakegpu/kubeletplugin/proto/*.proto)

.PHONY: demo test test-upgrade test-nvidia test-kind test-upgrade-kind test-matrix lint fuzz bench clean

demo: $(STAMP)
	$(VENV)/bin/fakegpu demo

# JUnit XML for CI (reports/ is ignored by git); e2e failure diagnostics land beside it.
# The cluster binaries are built first (cold: ~20 min on 2 cores, with progress), so no test
# ever finds them missing; warm, this is a cache lookup.
# With no PYTEST_ARGS it is the whole suite: everything on the embedded provider (the
# conformance suite included, on the same cluster), the conformance suite and NVIDIA-facing
# suites again with the plugins NVIDIA-compatible (gpu.nvidia.com), then the e2e suites on kind
# (fakegpu starts its own dockerd when none runs; kind needs root).
# NVIDIA's demo shapes (e2e/nvidia/) need the NVIDIA-compatible cluster of test-nvidia: the
# other passes deselect them rather than list them as skipped (run alone, they say why they skip).
ONLY_IN_TEST_NVIDIA := --deselect e2e/nvidia/
# The first pass leaves two kinds of tests to passes of their own: the upgrade suite (it holds
# a rate of pods per node while plugins are replaced: test-upgrade) and the tests that need
# Docker (kind clusters, image builds: test-kind). In the first pass, beside three busy workers
# on two cores, the upgrade load queued 151 of 392 pods past its 420 s settle (CI, 2026-12-06).
FIRST_PASS := $(ONLY_IN_TEST_NVIDIA) --deselect e2e/test_upgrade.py -m "not docker"
# Tests run in parallel (pytest-xdist), each e2e test in its own namespace on the one cluster
# of its topology; `serial` tests run alone (docs/testing.md). The e2e tests mostly wait on
# the cluster, so more workers than the 2 cores pay; kind nodes are heavier, so fewer there.
# PYTEST_WORKERS=0 runs everything in this one process, as before.
PYTEST_WORKERS ?= 4
KIND_WORKERS ?= 2
XDIST = -n $(1) $(if $(filter 0,$(1)),,--dist load)
# After the passes, also when one fails: the slowest test files and each bring-up.
COSTS = $(VENV)/bin/python -m fakegpu.testkit.costs
REPORTS = reports/junit.xml $(if $(strip $(PYTEST_ARGS)),,reports/junit-upgrade.xml \
	reports/junit-nvidia.xml reports/junit-kind.xml)
test: $(STAMP)
	$(VENV)/bin/fakegpu cluster binaries --kwok
	@rm -f $(REPORTS)
	@status=0; \
	$(VENV)/bin/python -m pytest $(call XDIST,$(PYTEST_WORKERS)) --junitxml=reports/junit.xml \
		$(if $(strip $(PYTEST_ARGS)),$(PYTEST_ARGS),$(FIRST_PASS)) || status=$$?; \
	if [ $$status -eq 0 ] && [ -z "$(strip $(PYTEST_ARGS))" ]; then \
		$(MAKE) --no-print-directory test-upgrade || status=$$?; \
		[ $$status -ne 0 ] || $(MAKE) --no-print-directory test-nvidia || status=$$?; \
		[ $$status -ne 0 ] || $(MAKE) --no-print-directory test-kind || status=$$?; \
	fi; \
	$(COSTS) $(REPORTS); exit $$status

# The upgrade suite on embedded, in one process with the machine to itself, as Kubernetes runs
# its [Serial] tests in a job of their own: its load is open-loop at 1 pod/s per node, and a
# host that other suites keep busy starts fewer pods than that, so the queue only grows.
test-upgrade: $(STAMP)
	$(VENV)/bin/python -m pytest -n 0 e2e/test_upgrade.py --junitxml=reports/junit-upgrade.xml

# NVIDIA's demo shapes (e2e/nvidia/) run here: their manifests name ubuntu:22.04 and a CUDA
# base image, pre-loaded as tags of the workload image (--fakegpu-image-alias).
NVIDIA_IMAGES := ubuntu:22.04 nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
test-nvidia: $(STAMP)
	$(VENV)/bin/python -m pytest $(call XDIST,$(PYTEST_WORKERS)) fakegpu/conformance \
		e2e/test_nvidia_compatible.py \
		e2e/test_computedomain.py e2e/test_basic_allocation.py e2e/test_pcie_alignment.py \
		e2e/test_nics.py e2e/test_nics_gb200.py e2e/nvidia --fakegpu-driver nvidia \
		--fakegpu-nic-driver dranet \
		$(foreach image,$(NVIDIA_IMAGES),--fakegpu-image-alias $(image)) \
		--fakegpu-cluster-name fakegpu-e2e-nv --junitxml=reports/junit-nvidia.xml

# The upgrade suite is left out of the kind pass: at the load this 2-core VM sustains on kind
# it takes about 25 min (test-upgrade-kind runs it; docs/upgrades.md). The conformance suite
# runs here too (e2e/ leaves to it what it checks), its report beside the embedded pass's, and
# so do the tests that need Docker (marker docker: the plugin image, a vendor's chart on kind).
test-kind: $(STAMP)
	$(VENV)/bin/python -m pytest $(call XDIST,$(KIND_WORKERS)) e2e tests/kind fakegpu/conformance \
		-m "e2e or docker" --fakegpu-provider kind \
		--deselect e2e/test_upgrade.py $(ONLY_IN_TEST_NVIDIA) --junitxml=reports/junit-kind.xml \
		--fakegpu-conformance-report reports/conformance/kind

UPGRADE_LOAD_RATE ?= 0.25
test-upgrade-kind: $(STAMP)
	FAKEGPU_UPGRADE_LOAD_RATE=$(UPGRADE_LOAD_RATE) $(VENV)/bin/python -m pytest \
		e2e/test_upgrade.py -m e2e --fakegpu-provider kind --junitxml=reports/junit-upgrade-kind.xml

# Each Kubernetes minor live on the embedded provider: conformance and the suites that need no
# newer minor's features, a JUnit report per minor and reports/matrix/results.md
# (docs/testing.md#every-minor-live). MATRIX_MINORS picks; a minor not cached is built first.
# MATRIX_KIND_MINORS: the same suites on kind at these minors too (empty: none).
MATRIX_MINORS ?= 1.34 1.35 1.36 1.37 1.38
MATRIX_KIND_MINORS ?= 1.34
test-matrix: $(STAMP)
	MINORS="$(MATRIX_MINORS)" KIND_MINORS="$(MATRIX_KIND_MINORS)" KIND_WORKERS=$(KIND_WORKERS) \
		tools/test-matrix.sh

# Every fuzz target for FUZZ_SECONDS each (docs/reliability.md has the counts of the last long run).
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	tools/fuzz.sh $(FUZZ_SECONDS)

# The benchmarks that need no cluster (docs/benchmarks.md); JSON in reports/benchmarks/.
# BENCH_ARGS=--cluster adds those that bring clusters up; --only NAME,NAME picks (--list).
bench: $(STAMP)
	$(VENV)/bin/python benchmarks/run.py $(BENCH_ARGS)

# mypy (strict) checks the package and the e2e suites, which other projects read as examples.
# lint-imports: the import contract (pyproject.toml [tool.importlinter], docs/architecture.md).
lint: $(STAMP)
	$(VENV)/bin/ruff check fakegpu tests e2e benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --explicit-package-bases e2e
	$(VENV)/bin/lint-imports --no-logo

$(STAMP): $(SOURCES)
	@echo ">>> creating $(VENV) and installing fakegpu (editable) with test tools"
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --progress-bar on -q --upgrade pip
	$(VENV)/bin/python -m pip install --progress-bar on -e '.[dev]'
	@touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info fakegpu/nvml/lib
