#!/usr/bin/env bash
# A local Kubernetes control plane from upstream Go modules, on 127.0.0.1.
#
#   scripts/control-plane.sh build   # build etcd, kube-apiserver, kube-scheduler,
#                                    # kube-controller-manager, kubectl and kwok (cached)
#   scripts/control-plane.sh up      # start them; prints the kubeconfig path
#   scripts/control-plane.sh down    # stop every process it started, delete its data
#   scripts/control-plane.sh env     # print `export KUBECONFIG=...` for a running plane
#   scripts/control-plane.sh karpenter  # fetch Karpenter's CRDs and examples/v1 (cached);
#                                    # prints the directory
#
# Binaries are cached under ${CAPSTAN_CACHE:-~/.cache/capstan}/k8s-<version>/ and rebuilt
# only when one is missing. The running plane lives in ${CAPSTAN_CP_DIR:-/tmp/capstan-cp}.
# Settings (environment): CAPSTAN_CP_QPS (client QPS of kube-scheduler and
# kube-controller-manager, default 200; burst is twice that), CAPSTAN_KWOK_PODS
# (general|fast: kwok's pod stages, default general).
set -euo pipefail

K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.13
KWOK_VERSION=v0.7.0
# Karpenter's own files the end-to-end tests read (its CRDs, the AWS provider's examples/v1):
# fetched from the Go module proxy, never copied into this repository.
KARPENTER_VERSION=v1.15.0
KARPENTER_AWS_VERSION=v1.15.2

CACHE_ROOT=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
CACHE=$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION
BIN=$CACHE/bin
STAGES=$CACHE/kwok-stages
CP_DIR=${CAPSTAN_CP_DIR:-/tmp/capstan-cp}
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok)
PORTS=(2379 2380 6443 10257 10259)

log() { echo "control-plane: $*" >&2; }
die() { log "$*"; exit 1; }

all_built() {
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done
  [[ -f $STAGES/node/fast/node-initialize.yaml ]] || return 1
}

# A throwaway module in $1 requiring the given package paths at their versions.
throwaway_module() {
  local dir=$1
  mkdir -p "$dir"
  (cd "$dir" && [[ -f go.mod ]] || (cd "$dir" && go mod init "capstan.dev/cp/$(basename "$dir")" >/dev/null 2>&1))
}

build_kubernetes() {
  local dir=$CACHE/src/kubernetes minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  throwaway_module "$dir"
  cd "$dir"
  # k8s.io/kubernetes replaces every staging module with ./staging/src/...; point each at
  # the published module of the same release instead.
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [[ -f $gomod ]] || die "no go.mod for k8s.io/kubernetes@$K8S_VERSION"
  local staging=v0.${K8S_VERSION#v1.}
  grep -E '^\s*k8s\.io/[^ ]+ => \./staging/src/' "$gomod" \
    | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}' >replaces.txt
  [[ -s replaces.txt ]] || die "found no staging replace lines in $gomod"
  grep -v '^replace ' go.mod >go.mod.new || true
  cat go.mod.new replaces.txt >go.mod
  rm -f go.mod.new
  local pkgs=(cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubectl)
  local p full=()
  for p in "${pkgs[@]}"; do full+=("k8s.io/kubernetes/$p"); done
  go get "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  go get "${full[@]/%/@$K8S_VERSION}" >/dev/null
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$BIN/" "${full[@]}"
}

build_etcd() {
  local dir=$CACHE/src/etcd
  throwaway_module "$dir"
  cd "$dir"
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
}

build_kwok() {
  local dir=$CACHE/src/kwok
  throwaway_module "$dir"
  cd "$dir"
  go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >/dev/null
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok
  # The binary has no stages built in; keep the module's stage files beside it.
  local src
  src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  [[ -d $src ]] || die "kwok stages not found at $src"
  rm -rf "$STAGES" && mkdir -p "$STAGES" && cp -r "$src"/. "$STAGES"/ && chmod -R u+w "$STAGES"
}

cmd_build() {
  command -v go >/dev/null || die "go is needed to build the control plane"
  if all_built; then log "binaries cached in $BIN"; return; fi
  mkdir -p "$BIN"
  local t0=$SECONDS
  [[ -x $BIN/etcd ]] || (log "building etcd $ETCD_VERSION"; build_etcd)
  { [[ -x $BIN/kwok ]] && [[ -f $STAGES/node/fast/node-initialize.yaml ]]; } || (log "building kwok $KWOK_VERSION"; build_kwok)
  local b missing=0
  for b in kube-apiserver kube-scheduler kube-controller-manager kubectl; do [[ -x $BIN/$b ]] || missing=1; done
  [[ $missing == 0 ]] || (log "building kubernetes $K8S_VERSION (about 7 minutes on 2 cores)"; build_kubernetes)
  all_built || die "build finished but binaries are missing in $BIN"
  log "built in $((SECONDS - t0)) s: $BIN"
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # url, seconds, curl args...
  local url=$1 secs=$2; shift 2
  local i
  for ((i = 0; i < secs * 10; i++)); do
    if curl -fsS -o /dev/null "$@" "$url" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

start() { # name, command...
  local name=$1; shift
  "$@" >"$CP_DIR/logs/$name.log" 2>&1 &
  echo $! >"$CP_DIR/pids/$name"
}

pki() {
  local d=$CP_DIR/pki
  mkdir -p "$d"
  cd "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=capstan-local-ca" 2>/dev/null
  cat >server.ext <<EOF
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default
extendedKeyUsage=serverAuth
EOF
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
    -days 3650 -extfile server.ext 2>/dev/null
  echo "extendedKeyUsage=clientAuth" >client.ext
  openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt \
    -days 3650 -extfile client.ext 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cat >"$CP_DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capstan-local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: $d/ca.crt
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: capstan-local
  context: {cluster: capstan-local, user: admin}
current-context: capstan-local
EOF
}

kwok_config() {
  local pods=${CAPSTAN_KWOK_PODS:-general} f=$CP_DIR/kwok.yaml
  {
    echo "apiVersion: config.kwok.x-k8s.io/v1alpha1"
    echo "kind: KwokConfiguration"
    echo "options: {}"
    local s
    for s in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml; do
      echo "---"; cat "$STAGES/$s"
    done
    if [[ $pods == fast ]]; then
      for s in "$STAGES"/pod/fast/*.yaml; do echo "---"; cat "$s"; done
    else
      for s in pod-create pod-init-container-running pod-init-container-completed pod-ready pod-complete pod-delete; do
        echo "---"; cat "$STAGES/pod/general/$s.yaml"
      done
    fi
  } >"$f"
}

cmd_up() {
  cmd_build
  if [[ -f $CP_DIR/pids/kube-apiserver ]] && kill -0 "$(cat "$CP_DIR/pids/kube-apiserver")" 2>/dev/null; then
    die "a control plane is already running from $CP_DIR (scripts/control-plane.sh down stops it)"
  fi
  local p
  for p in "${PORTS[@]}"; do
    port_taken "$p" && die "port 127.0.0.1:$p is taken; refusing to start beside another cluster"
  done
  rm -rf "$CP_DIR" && mkdir -p "$CP_DIR"/{logs,pids,etcd}
  (pki)
  kwok_config
  local t0=$SECONDS qps=${CAPSTAN_CP_QPS:-200}
  start etcd "$BIN/etcd" --data-dir="$CP_DIR/etcd" --name=node0 \
    --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster=node0=http://127.0.0.1:2380 --unsafe-no-fsync=true --log-level=warn
  wait_for http://127.0.0.1:2379/health 30 || { cmd_down; die "etcd did not become healthy (see $CP_DIR/logs/etcd.log)"; }
  local pki=$CP_DIR/pki
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 \
    --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key" \
    --client-ca-file="$pki/ca.crt" --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
    --endpoint-reconciler-type=none --max-requests-inflight=1000 --max-mutating-requests-inflight=500
  wait_for https://127.0.0.1:6443/readyz 60 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    || { cmd_down; die "kube-apiserver did not become ready (see $CP_DIR/logs/kube-apiserver.log)"; }
  local kc=$CP_DIR/kubeconfig
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$kc" --leader-elect=false \
    --bind-address=127.0.0.1 --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=false \
    --controllers='*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller' \
    --kube-api-qps="$qps" --kube-api-burst=$((qps * 2))
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$kc" --leader-elect=false --bind-address=127.0.0.1 \
    --kube-api-qps="$qps" --kube-api-burst=$((qps * 2))
  start kwok "$BIN/kwok" --kubeconfig="$kc" --config="$CP_DIR/kwok.yaml" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake --cidr=10.64.0.0/16 \
    --node-lease-duration-seconds=40
  wait_for https://127.0.0.1:10257/healthz 60 -k || { cmd_down; die "kube-controller-manager did not become healthy"; }
  wait_for https://127.0.0.1:10259/healthz 60 -k || { cmd_down; die "kube-scheduler did not become healthy"; }
  # The default namespace and service account appear shortly after the controllers start.
  local i
  for ((i = 0; i < 300; i++)); do
    "$BIN/kubectl" --kubeconfig="$kc" -n default get serviceaccount default >/dev/null 2>&1 && break
    sleep 0.1
  done
  for p in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    kill -0 "$(cat "$CP_DIR/pids/$p")" 2>/dev/null || { cmd_down; die "$p exited (see $CP_DIR/logs/$p.log)"; }
  done
  log "up in $((SECONDS - t0)) s (client QPS $qps, kwok pod stages ${CAPSTAN_KWOK_PODS:-general})"
  echo "$kc"
}

cmd_down() {
  [[ -d $CP_DIR/pids ]] || return 0
  local p pid
  for p in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [[ -f $CP_DIR/pids/$p ]] || continue
    pid=$(cat "$CP_DIR/pids/$p")
    kill "$pid" 2>/dev/null || true
  done
  for p in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [[ -f $CP_DIR/pids/$p ]] || continue
    pid=$(cat "$CP_DIR/pids/$p")
    local i
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$CP_DIR/pids/$p"
  done
  if [[ ${CAPSTAN_CP_KEEP_LOGS:-} == 1 ]]; then
    rm -rf "$CP_DIR/etcd"
  else
    rm -rf "$CP_DIR"
  fi
  log "down"
}

cmd_karpenter() {
  local dir=$CACHE_ROOT/karpenter-$KARPENTER_VERSION-aws-$KARPENTER_AWS_VERSION
  if [[ -f $dir/crds/karpenter.sh_nodepools.yaml && -f $dir/examples/v1/general-purpose.yaml ]]; then
    echo "$dir"; return
  fi
  command -v unzip >/dev/null || die "unzip is needed to read the module zips"
  local proxy
  proxy=$(go env GOPROXY 2>/dev/null | tr ',' '\n' | grep -m1 '^http' || echo https://proxy.golang.org)
  local tmp
  tmp=$(mktemp -d)
  curl -fsSL -o "$tmp/core.zip" "$proxy/sigs.k8s.io/karpenter/@v/$KARPENTER_VERSION.zip" \
    || die "cannot fetch sigs.k8s.io/karpenter@$KARPENTER_VERSION from $proxy"
  curl -fsSL -o "$tmp/aws.zip" "$proxy/github.com/aws/karpenter-provider-aws/@v/$KARPENTER_AWS_VERSION.zip" \
    || die "cannot fetch github.com/aws/karpenter-provider-aws@$KARPENTER_AWS_VERSION from $proxy"
  rm -rf "$dir" && mkdir -p "$dir/crds" "$dir/examples/v1"
  (cd "$tmp" && unzip -q core.zip "sigs.k8s.io/karpenter@$KARPENTER_VERSION/pkg/apis/crds/*" \
    && unzip -q aws.zip "github.com/aws/karpenter-provider-aws@$KARPENTER_AWS_VERSION/examples/v1/*")
  cp "$tmp/sigs.k8s.io/karpenter@$KARPENTER_VERSION"/pkg/apis/crds/karpenter.sh_*.yaml "$dir/crds/"
  cp "$tmp/github.com/aws/karpenter-provider-aws@$KARPENTER_AWS_VERSION"/examples/v1/*.yaml "$dir/examples/v1/"
  chmod -R u+w "$dir"; rm -rf "$tmp"
  log "Karpenter $KARPENTER_VERSION CRDs and $KARPENTER_AWS_VERSION examples in $dir"
  echo "$dir"
}

cmd_env() {
  [[ -f $CP_DIR/kubeconfig ]] || die "no control plane in $CP_DIR"
  echo "export KUBECONFIG=$CP_DIR/kubeconfig"
  echo "export PATH=$BIN:\$PATH"
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  bin) echo "$BIN" ;;
  karpenter) cmd_karpenter ;;
  *) echo "usage: $0 build|up|down|env|bin|karpenter" >&2; exit 2 ;;
esac
