# The benchmark verbs (included by the top Makefile). bench/harness.py says what a grid runs.
BENCH_ARGS ?=

.PHONY: bench bench-quick bench-smoke bench-report bench-k8s bench-cluster

bench: ## full benchmark grid on the local runtime (T ~ 60 s; hours), then docs/benchmarks/README.md
	$(PY) bench/harness.py --grid full --report $(BENCH_ARGS)

bench-quick: ## reduced grid (~90 min on a quiet 2-core machine), then docs/benchmarks/README.md
	$(PY) bench/harness.py --grid quick --report $(BENCH_ARGS)

bench-smoke: ## 2-3 min run of the harness into a temp dir (CI; asserts no performance)
	$(PY) bench/harness.py --grid smoke --no-wait --report $(BENCH_ARGS)

bench-report: ## regenerate docs/benchmarks/README.md and plots from results.json
	$(PY) bench/report.py

bench-k8s: ## cluster subset (resnet; d1.5 d1.8 d2.5 move-0.8; decor, decor-nn): cluster up, this checkout's operator, runs added to docs/benchmarks (--resume), cluster down
	@trap 'bash cluster/cluster-down.sh' EXIT; set -e; \
	bash cluster/cluster-up.sh >/dev/null; bash cluster/build-images.sh; \
	. cluster/env.sh; \
	$(PY) bench/harness.py --runtime k8s --resume --report $(BENCH_ARGS)

bench-cluster: ## SIMULATION of the cluster planner: 5 policies on traces of 300-1,000 jobs (~10 min), then docs/benchmarks/cluster/
	$(PY) bench/cluster_sim.py $(BENCH_ARGS)
