#!/usr/bin/env bash
# `make kind-down`: delete the kind cluster made by `make kind-up`.
set -euo pipefail
KIND_CLUSTER=${KIND_CLUSTER:-decor}
kind delete cluster --name "$KIND_CLUSTER"
