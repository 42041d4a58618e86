# DECOR test bed targets; the top-level Makefile does `include cluster/cluster.mk`.
# See docs/cluster.md.
# (`make e2e` is the top Makefile's: pytest tests/e2e on $KUBECONFIG; `. cluster/env.sh` or
# `. cluster/kind-env.sh` first, or use `bash cluster/e2e.sh`, which picks the test bed itself.)
.PHONY: cluster-up cluster-down cluster-purge cluster-status images torch2-test gpu-test kind-up kind-down

cluster-up: ## start the single-node Kubernetes test bed (first run builds k8s 1.35 from source)
	@bash cluster/cluster-up.sh >/dev/null

cluster-down: ## stop the test bed: no process, mount, interface or cgroup left behind
	@bash cluster/cluster-down.sh

cluster-purge: ## cluster-down, and also delete the image store, certificates and logs
	@bash cluster/cluster-down.sh --purge

cluster-status: ## show the test bed's processes, node and pods
	@bash cluster/cluster-status.sh

# REGISTRY=host:port/prefix pushes them there instead (cluster/push-images.sh; skopeo, TLS
# verified unless REGISTRY_INSECURE=1; credentials from `skopeo login HOST`; IMAGE_TAG).
images: ## build the trainer/operator images without Docker and import them (needs cluster-up); REGISTRY=host:port/prefix: push them there
	@if [ -n "$(REGISTRY)" ]; then bash cluster/push-images.sh "$(REGISTRY)"; else bash cluster/build-images.sh; fi

# (root) The image's layers come from `make images` or `cluster/build-images.sh --no-import`.
torch2-test: ## run decor_trainer's tests on PyTorch 2.x: in the trainer image's root filesystem (chroot; root)
	@bash cluster/trainer-rootfs-tests.sh -q

gpu-test: ## run the trainer on a CUDA device (tests/gpu), with the python3 whose PyTorch sees the GPU
	PYTHONPATH=trainer_image python3 -m pytest -p no:cacheprovider -p no:benchmark tests/gpu

kind-up: ## (machines with Docker) the same e2e environment on kind
	@bash cluster/kind-up.sh >/dev/null

kind-down: ## delete the kind cluster
	@bash cluster/kind-down.sh
