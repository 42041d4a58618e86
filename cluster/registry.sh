#!/usr/bin/env bash
# The test bed's image registry: Debian's docker-registry (the CNCF distribution registry),
# listening on 127.0.0.1:5000 only (BED_REGISTRY in lib.sh), plain HTTP, no authentication,
# storage under /var/lib/decor-cluster/registry, run as the package's docker-registry user.
# containerd pulls from it through a hosts directory (its config_path) that cluster-up.sh
# writes with `registry.sh hosts`; `make images REGISTRY=127.0.0.1:5000 REGISTRY_INSECURE=1`
# pushes to it. See docs/cluster.md ("The test bed's registry").
#
#   registry.sh up          start it (idempotent; cluster-up.sh does this)
#   registry.sh down        stop it; the stored images stay (cluster-down.sh does this;
#                           cluster-down.sh --purge deletes them with the rest of the state)
#   registry.sh status      running or not, and the repositories it holds
#   registry.sh hosts DIR   write DIR/127.0.0.1:5000/hosts.toml: containerd reaches this
#                           registry over plain HTTP, for pull and resolve only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=registry
. "$here/lib.sh"

REGISTRY_BIN=/usr/bin/docker-registry
REGISTRY_USER=docker-registry   # made by the Debian package
PIDFILE=$CLUSTER_RUN/registry.pid
CONFIG=$CLUSTER_STATE/config/registry.yml
URL=http://$BED_REGISTRY

registry_pid() { # the running registry's pid, or nothing
  [ -f "$PIDFILE" ] || return 1
  local pid; pid=$(cat "$PIDFILE")
  [ -d "/proc/$pid" ] && grep -qa -- docker-registry "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}
answers() { curl -fsS --max-time 5 "$URL/v2/" >/dev/null 2>&1; }

# hosts_toml HOST: containerd's hosts.toml for HOST served over plain HTTP (pull and resolve;
# no push: nothing on the node pushes).
hosts_toml() {
  cat <<EOF
# Written by cluster/registry.sh: the test bed's registry, plain HTTP on loopback.
server = "http://$1"

[host."http://$1"]
  capabilities = ["pull", "resolve"]
EOF
}

cmd_hosts() {
  local dir=${1:-}
  [ -n "$dir" ] || die "usage: registry.sh hosts DIR"
  mkdir -p "$dir/$BED_REGISTRY"
  hosts_toml "$BED_REGISTRY" > "$dir/$BED_REGISTRY/hosts.toml.tmp"
  mv "$dir/$BED_REGISTRY/hosts.toml.tmp" "$dir/$BED_REGISTRY/hosts.toml"
}

cmd_up() {
  need_root
  local pid
  if pid=$(registry_pid); then log "registry already running (pid $pid) on $BED_REGISTRY"; return 0; fi
  apt_ensure docker-registry
  getent passwd "$REGISTRY_USER" >/dev/null || die "no user $REGISTRY_USER (the docker-registry package makes it)"
  if answers || ss -ltn "sport = :${BED_REGISTRY##*:}" 2>/dev/null | grep -q LISTEN; then
    die "something else listens on $BED_REGISTRY; stop it first (ss -ltnp 'sport = :${BED_REGISTRY##*:}')"
  fi
  mkdir -p "$CLUSTER_RUN" "$LOGS" "$(dirname "$CONFIG")" "$REGISTRY_DATA"
  chown "$REGISTRY_USER:" "$REGISTRY_DATA"; chmod 750 "$REGISTRY_DATA"
  cat > "$CONFIG" <<EOF
# Written by cluster/registry.sh. The test bed's registry: loopback only, plain HTTP, no auth.
version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: $REGISTRY_DATA
  cache:
    blobdescriptor: inmemory
  delete:
    enabled: true
http:
  addr: $BED_REGISTRY
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
EOF
  chmod 644 "$CONFIG"
  log "starting docker-registry on $BED_REGISTRY (storage $REGISTRY_DATA, log $LOGS/registry.log)"
  setsid setpriv --reuid="$REGISTRY_USER" --regid="$REGISTRY_USER" --clear-groups \
    "$REGISTRY_BIN" serve "$CONFIG" >>"$LOGS/registry.log" 2>&1 </dev/null &
  echo $! > "$PIDFILE"
  wait_for "the registry on $BED_REGISTRY" 30 answers || {
    tail -n 20 "$LOGS/registry.log" >&2 || true
    die "the registry did not answer on $URL/v2/; see $LOGS/registry.log"
  }
}

cmd_down() {
  need_root
  local pid end
  if ! pid=$(registry_pid); then rm -f "$PIDFILE"; return 0; fi
  log "stopping the registry (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  end=$((SECONDS + 10))
  while [ -d "/proc/$pid" ] && [ $SECONDS -lt $end ]; do sleep 0.2; done
  [ -d "/proc/$pid" ] && { log "registry did not exit in 10s; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$PIDFILE"
}

cmd_status() {
  local pid
  if pid=$(registry_pid); then
    printf '  %-24s running (pid %s) on %s, catalog %s\n' registry "$pid" "$BED_REGISTRY" \
      "$(curl -fsS --max-time 5 "$URL/v2/_catalog" 2>/dev/null || echo '(no answer)')"
  else
    printf '  %-24s stopped\n' registry
    return 1
  fi
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  hosts) shift; cmd_hosts "$@" ;;
  *) die "usage: registry.sh up | down | status | hosts DIR" ;;
esac
