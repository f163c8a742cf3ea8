#!/usr/bin/env bash
# capstan's Helm chart (deploy/chart/capstan), checked without the helm binary: rendered with
# PyPI's helm-python-sdk for every values file in deploy/chart/values, each object validated
# strictly against the Kubernetes version's schemas (kubernetes-validate), and compared with the
# committed renderings in deploy/chart/golden; then applied server-side, as a dry run and for
# real, on a cluster (with the campaign Job in deploy/campaign). The tools live in a virtualenv
# under ~/.cache/capstan.
#
#   scripts/chart.sh render             # rewrite deploy/chart/golden
#   scripts/chart.sh check              # fail when a rendering differs from its golden file
#   scripts/chart.sh apply KUBECONFIG   # server-side apply (dry run, then for real, then delete),
#                                       # the chart's renderings and deploy/campaign
set -euo pipefail
cd "$(dirname "$0")/.."
HELM_SDK=0.2.2
VALIDATE=1.37.0
K8S=${CAPSTAN_K8S_VERSION:-1.34.4}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/capstan/chart-tools-$HELM_SDK-$VALIDATE

die() { echo "chart.sh: $*" >&2; exit 1; }

tools() {
  if [[ -f $CACHE/.installed ]]; then
    return
  fi
  echo "installing helm-python-sdk==$HELM_SDK kubernetes-validate==$VALIDATE into $CACHE" >&2
  rm -rf "$CACHE"
  python3 -m venv "$CACHE" || die "python3 -m venv failed"
  "$CACHE/bin/pip" install --quiet --disable-pip-version-check \
    "helm-python-sdk==$HELM_SDK" "kubernetes-validate==$VALIDATE" pyyaml >&2 \
    || { rm -rf "$CACHE"; die "pip install failed"; }
  touch "$CACHE/.installed"
}

crds_match() {
  for f in crds/*.yaml; do
    cmp -s "$f" "deploy/chart/capstan/crds/$(basename "$f")" \
      || die "deploy/chart/capstan/crds/$(basename "$f") differs from $f (copy crds/*.yaml into the chart)"
  done
}

case ${1:-} in
  render)
    tools
    cp crds/*.yaml deploy/chart/capstan/crds/
    "$CACHE/bin/python" deploy/chart/render.py --kubernetes-version "$K8S"
    ;;
  check)
    tools
    crds_match
    "$CACHE/bin/python" deploy/chart/render.py --check --kubernetes-version "$K8S"
    ;;
  apply)
    kubeconfig=${2:?usage: scripts/chart.sh apply KUBECONFIG}
    kubectl="$(scripts/control-plane.sh bin)/kubectl --kubeconfig $kubeconfig"
    $kubectl apply --server-side --force-conflicts -f deploy/chart/capstan/crds/ >/dev/null
    # The ServiceMonitor's CRD stands in for prometheus-operator's (deploy/chart/testdata).
    $kubectl apply --server-side --force-conflicts -f deploy/chart/testdata/servicemonitor-crd.yaml >/dev/null
    $kubectl wait --for=condition=Established --timeout=60s crd/servicemonitors.monitoring.coreos.com >/dev/null
    for golden in deploy/chart/golden/*.yaml; do
      $kubectl apply --server-side --force-conflicts --dry-run=server -f "$golden" >/dev/null \
        || die "$golden: the server refuses it (dry run)"
      $kubectl apply --server-side --force-conflicts -f "$golden" >/dev/null \
        || die "$golden: the server refuses it"
      $kubectl delete -f "$golden" --wait=true >/dev/null
      echo "$golden: applied server-side (dry run, then for real) and deleted"
    done
    # The campaign Job (deploy/campaign) in its namespace.
    $kubectl create namespace capstan-campaigns --dry-run=client -o yaml | $kubectl apply --server-side -f - >/dev/null
    for manifest in deploy/campaign/*.yaml; do
      $kubectl apply --server-side --dry-run=server -f "$manifest" >/dev/null \
        || die "$manifest: the server refuses it (dry run)"
      $kubectl apply --server-side -f "$manifest" >/dev/null || die "$manifest: the server refuses it"
      $kubectl delete -f "$manifest" --wait=true >/dev/null
      echo "$manifest: applied server-side (dry run, then for real) and deleted"
    done
    $kubectl delete namespace capstan-campaigns --wait=false >/dev/null
    $kubectl delete -f deploy/chart/testdata/servicemonitor-crd.yaml --wait=false >/dev/null
    ;;
  *)
    die "usage: scripts/chart.sh render|check|apply KUBECONFIG"
    ;;
esac
