# The benchmark verbs (included by the top Makefile), each a module of the bench package run
# from the repository root. bench/harness.py says what a grid runs.
BENCH_ARGS ?=

.PHONY: bench bench-quick bench-smoke bench-report bench-k8s bench-cluster

bench: ## full benchmark grid on the local runtime (T ~ 60 s; hours), then docs/benchmarks/README.md
	$(PY) -m bench.harness --grid full --report $(BENCH_ARGS)

bench-quick: ## reduced grid, 6 workloads (~3 h on a quiet 2-core machine), then docs/benchmarks/README.md
	$(PY) -m bench.harness --grid quick --report $(BENCH_ARGS)

bench-smoke: ## 2-3 min run of the harness into a temp dir (CI; asserts no performance)
	$(PY) -m bench.harness --grid smoke --no-wait --report $(BENCH_ARGS)

bench-report: ## regenerate docs/benchmarks/README.md and plots from results.json
	$(PY) -m bench.report

bench-k8s: ## cluster subset (resnet vgg lstm; d1.5 d1.8 d2.5 move-0.8 disturb; decor, decor-nn; x2; ~45 min): cluster up, this checkout's operator, runs added to docs/benchmarks (--resume), cluster down
	@trap 'bash cluster/cluster-down.sh' EXIT; set -e; \
	bash cluster/cluster-up.sh >/dev/null; bash cluster/build-images.sh; \
	. cluster/env.sh; \
	$(PY) -m bench.harness --runtime k8s --resume --report $(BENCH_ARGS)

bench-cluster: ## SIMULATION of the cluster planner: 5 policies on traces of 30-1,000 jobs, a clairvoyant bound on exact ones (~10 min), then docs/benchmarks/cluster/
	$(PY) -m bench.cluster_sim $(BENCH_ARGS)

# The scale test bed (cluster/scale/, its own etcd/apiserver/kwok/Prometheus beside the main bed)
.PHONY: scale-up scale-down bench-scale bench-scale-smoke bench-scale-report bench-period-cost

scale-up: ## start the scale test bed: own apiserver, kwok fake nodes, Prometheus, simulated trainers
	@PY=$(PY) bash cluster/scale/scale-up.sh >/dev/null

scale-down: ## stop the scale test bed and delete its state (the main test bed is untouched)
	@bash cluster/scale/scale-down.sh

bench-scale: ## the operator (two replicas, leader election) at 100, 300, 1,000 jobs on the scale bed (~60 min, quiet machine; BENCH_ARGS="--jobs 1000" one size) -> docs/benchmarks/scale
	$(PY) -m bench.scale.bench_scale --grid full $(BENCH_ARGS)

bench-scale-smoke: ## 50 jobs on the scale bed into a temp dir (a few minutes; CI; asserts no performance)
	@out=$$(mktemp -d); trap 'rm -rf "$$out"; bash cluster/scale/scale-down.sh' EXIT; \
	$(PY) -m bench.scale.bench_scale --grid smoke --out "$$out/results.json" $(BENCH_ARGS) && \
	$(PY) -m bench.scale.check_smoke "$$out/results.json"

bench-scale-report: ## regenerate docs/benchmarks/scale/README.md and costs.png from results.json
	$(PY) -m bench.scale.scale_report

bench-period-cost: ## the control loop's per-period work at 1,000 jobs, in-process against the fakes (~2 min; no bed): ms per plan and per commit, p50/p99
	$(PY) -m bench.scale.period_cost $(BENCH_ARGS)
