#!/usr/bin/env bash
# Generate the test bed's certificates with openssl into $PKI (once; reused while present).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LOG_TAG=pki
. "$here/lib.sh"

mkdir -p "$PKI"; chmod 700 "$PKI"; cd "$PKI"
[ -f .complete ] && [ "$(cat .complete)" = "$NODE_NAME $POD_GW $KUBERNETES_SVC_IP" ] && exit 0
log "generating certificates in $PKI"
rm -f ./*.crt ./*.key ./*.pub ./*.csr ./*.srl ./*.ext .complete
days=3650
openssl genrsa -out ca.key 2048 2>/dev/null
openssl req -x509 -new -key ca.key -sha256 -days $days -subj "/CN=decor-test-bed-ca" -out ca.crt 2>/dev/null

# cert NAME SUBJECT [SAN] [usage]
cert() {
  local name=$1 subj=$2 san=${3:-} usage=${4:-clientAuth}
  openssl genrsa -out "$name.key" 2048 2>/dev/null
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
    -days $days -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}
api_san="IP:127.0.0.1,IP:$POD_GW,IP:$KUBERNETES_SVC_IP,DNS:localhost,DNS:$NODE_NAME,DNS:kubernetes"
api_san="$api_san,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver "/CN=kube-apiserver" "$api_san" serverAuth
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert admin "/O=system:masters/CN=decor-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert kube-proxy "/CN=system:kube-proxy"
cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
cert kubelet-serving "/CN=$NODE_NAME" "IP:$POD_GW,IP:127.0.0.1,DNS:$NODE_NAME,DNS:localhost" serverAuth
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
chmod 600 ./*.key
echo "$NODE_NAME $POD_GW $KUBERNETES_SVC_IP" > .complete
log "certificates ready"
