# gpuval — `make help` lists every target.
SHELL := /bin/bash
.DEFAULT_GOAL := help
UV ?= python3 -m uv
export GPUVAL_CACHE ?= $(HOME)/.cache/gpuval

.PHONY: help
help: ## List every target with its purpose
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Install uv (pinned) if missing and sync the locked Python environment into .venv
	@./hack/ensure-uv.sh
	$(UV) sync --frozen

.PHONY: browser
browser: ## Install Debian's chromium (root, once; .debs cached under $GPUVAL_CACHE) for the report's browser tests
	@./hack/ensure-chromium.sh

.PHONY: controlplane
controlplane: setup ## Build and cache etcd, the Kubernetes components (kubelet too), kwok, kwokctl, helm, prometheus, the real node's runtime, the chart's lint tools
	$(UV) run --frozen python -m gpuval_devtools.controlplane build

.PHONY: kueue
kueue: setup ## Build and cache Kueue's manager (Go module) and render its manifests from the module's config/ (docs/kueue.md)
	$(UV) run --frozen python -m gpuval_devtools.kueue

.PHONY: cluster-up
REAL_NODE ?=
cluster-up: controlplane ## Start a local control plane with simulated GPU nodes (kubeconfig path printed); REAL_NODE=1 adds a real node
	$(UV) run --frozen python -m gpuval_devtools.controlplane up --nodes 3 $(if $(REAL_NODE),--real-node)

.PHONY: cluster-down
cluster-down: ## Stop and delete the local control plane started by cluster-up
	$(UV) run --frozen python -m gpuval_devtools.controlplane down

.PHONY: generate
generate: setup ## Regenerate every generated file from its one source: CRDs (and the chart's copy), JSON schemas, docs tables (docs/operator/index.md's contents too), the dashboard, the chart README
	$(UV) run --frozen python -m gpuval_api.generate
	$(UV) run --frozen python -m gpuval_devtools.operatordocs
	$(UV) run --frozen python -m gpuval_devtools.dashboard
	$(UV) run --frozen python -m gpuval_devtools.chartdocs

.PHONY: crds
crds: generate ## Same as generate (the CRDs come from the types in api/)

.PHONY: dashboard
dashboard: setup ## Regenerate charts/gpuval/files/dashboard.json from gpuval_devtools.dashboard (its one source)
	$(UV) run --frozen python -m gpuval_devtools.dashboard

.PHONY: check-generated
check-generated: setup ## Fail when a generated file (CRDs, the chart's CRDs, schemas, docs tables, the Grafana dashboard, the chart README) is stale, or a link between the pages is broken
	$(UV) run --frozen python -m gpuval_api.generate --check
	$(UV) run --frozen python -m gpuval_devtools.operatordocs --check
	$(UV) run --frozen python -m gpuval_devtools.doclinks
	$(UV) run --frozen python -m gpuval_devtools.dashboard --check
	$(UV) run --frozen python -m gpuval_devtools.chartdocs --check

.PHONY: demo
DEMO_ARGS ?=
demo: setup controlplane ## The main job: local control plane + simulated GPU nodes + real operator and agents
	$(UV) run --frozen python -m gpuval_devtools.demo $(DEMO_ARGS)

.PHONY: chart-lint
chart-lint: controlplane ## helm lint and render tests of the chart, then kubeconform, kube-score and checkov on it (findings left: charts/gpuval/lint-findings.yaml)
	$(UV) run --frozen pytest -q tests/integration/chart/test_chart_render.py tests/integration/chart/test_chart_lint.py

.PHONY: chart-schemas
chart-schemas: controlplane ## Vendor kubeconform's schemas (charts/schemas/kubeconform) from a local API server and the Prometheus Operator's CRDs
	$(UV) run --frozen python -m gpuval_devtools.chartlint vendor-schemas

.PHONY: images-lint
images-lint: setup ## hadolint both Dockerfiles
	$(UV) run --frozen hadolint images/operator/Dockerfile images/agent/Dockerfile

REGISTRY ?= localhost/gpuval
TAG ?= 0.1.0
GPU ?=
LOAD ?=
.PHONY: images
images: setup ## Build the images here, no daemon (out/images/*.oci.tar): GPU=1 adds the GPU agent, LOAD=1 loads them into the running real node
	$(UV) run --frozen python -m gpuval_devtools.images build --registry $(REGISTRY) $(if $(GPU),--gpu) $(if $(LOAD),--load)

.PHONY: images-docker
images-docker: ## Build the operator and GPU agent images with a Docker engine: make images-docker REGISTRY=... TAG=...
	docker build -f images/operator/Dockerfile -t $(REGISTRY)/gpuval-operator:$(TAG) .
	docker build -f images/agent/Dockerfile -t $(REGISTRY)/gpuval-agent:$(TAG) .

.PHONY: krew
krew: setup ## Build kubectl gpuval's krew archive (out/krew/, the same bytes every time) and write its sha256 into kubectl-gpuval/krew/gpuval.yaml
	$(UV) run --frozen python -m gpuval_devtools.krew

.PHONY: lint
lint: setup ## ruff, mypy --strict, and the import contracts (the packages' walls, the operator's and agent's layers) over every package
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .
	$(UV) run --frozen mypy
	$(UV) run --frozen lint-imports --no-cache --no-logo

.PHONY: test
TEST_WORKERS ?= 3
test: setup controlplane kueue browser ## The README's test command: lint, generated-file check, unit, browser and cluster tests (with a real node), in TEST_WORKERS parallel workers (a control plane each)
	$(MAKE) lint check-generated
	$(UV) run --frozen pytest -m "not gpu and not real_node" --real-node -n $(TEST_WORKERS) --dist loadgroup
	$(UV) run --frozen pytest -m "real_node" --real-node tests/integration

.PHONY: report-screenshot
report-screenshot: setup browser ## Rerun the report's browser tests and keep their screenshots as docs/images/fleet-report.png, fleet-1000-report.png and fabric-report.png
	GPUVAL_SCREENSHOT_DIR=docs/images $(UV) run --frozen pytest -q tests/browser

.PHONY: test-unit
test-unit: setup ## Unit tests only (no cluster, no GPU), in TEST_WORKERS parallel workers
	$(UV) run --frozen pytest tests/unit -n $(TEST_WORKERS)

.PHONY: test-gpu
test-gpu: ## GPU tests (on a machine with NVIDIA GPUs and torch)
	python3 -m pytest -m gpu tests/gpu

.PHONY: clean
clean: ## Remove the virtualenv and caches of this checkout (keeps the control-plane cache)
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache
