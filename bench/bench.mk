# The benchmark verbs (included by the top Makefile). bench/harness.py says what a grid runs.
BENCH_ARGS ?=

.PHONY: bench bench-quick bench-smoke bench-report bench-k8s bench-cluster

bench: ## full benchmark grid on the local runtime (T ~ 60 s; hours), then docs/benchmarks/README.md
	$(PY) bench/harness.py --grid full --report $(BENCH_ARGS)

bench-quick: ## reduced grid, 4 workloads (~2 h on a quiet 2-core machine), then docs/benchmarks/README.md
	$(PY) bench/harness.py --grid quick --report $(BENCH_ARGS)

bench-smoke: ## 2-3 min run of the harness into a temp dir (CI; asserts no performance)
	$(PY) bench/harness.py --grid smoke --no-wait --report $(BENCH_ARGS)

bench-report: ## regenerate docs/benchmarks/README.md and plots from results.json
	$(PY) bench/report.py

bench-k8s: ## cluster subset (resnet vgg lstm; d1.5 d1.8 d2.5 move-0.8 disturb; decor, decor-nn; x2; ~45 min): cluster up, this checkout's operator, runs added to docs/benchmarks (--resume), cluster down
	@trap 'bash cluster/cluster-down.sh' EXIT; set -e; \
	bash cluster/cluster-up.sh >/dev/null; bash cluster/build-images.sh; \
	. cluster/env.sh; \
	$(PY) bench/harness.py --runtime k8s --resume --report $(BENCH_ARGS)

bench-cluster: ## SIMULATION of the cluster planner: 5 policies on traces of 30-1,000 jobs, a clairvoyant bound on exact ones (~10 min), then docs/benchmarks/cluster/
	$(PY) bench/cluster_sim.py $(BENCH_ARGS)

# The scale test bed (cluster/scale/, its own etcd/apiserver/kwok/Prometheus beside the main bed)
.PHONY: scale-up scale-down bench-scale bench-scale-smoke bench-scale-report

scale-up: ## start the scale test bed: own apiserver, kwok fake nodes, Prometheus, simulated trainers
	@PY=$(PY) bash cluster/scale/scale-up.sh >/dev/null

scale-down: ## stop the scale test bed and delete its state (the main test bed is untouched)
	@bash cluster/scale/scale-down.sh

bench-scale: ## the operator at 100, 300, 1,000 jobs on the scale bed (~60 min, quiet machine) -> docs/benchmarks/scale
	$(PY) bench/scale/bench_scale.py --grid full $(BENCH_ARGS)

bench-scale-smoke: ## 50 jobs on the scale bed into a temp dir (a few minutes; CI; asserts no performance)
	@out=$$(mktemp -d); trap 'rm -rf "$$out"; bash cluster/scale/scale-down.sh' EXIT; \
	$(PY) bench/scale/bench_scale.py --grid smoke --out "$$out/results.json" $(BENCH_ARGS) && \
	$(PY) bench/scale/check_smoke.py "$$out/results.json"

bench-scale-report: ## regenerate docs/benchmarks/scale/README.md and costs.png from results.json
	$(PY) bench/scale/scale_report.py
