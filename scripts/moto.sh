#!/usr/bin/env bash
# moto (moto[server], pinned) on 127.0.0.1: the EC2, SQS and IAM endpoints the AWS provider's
# tests talk to. Installed into a virtualenv under ~/.cache/capstan (reused when present).
#
#   scripts/moto.sh up     # install if needed, start, print the endpoint (http://127.0.0.1:PORT)
#   scripts/moto.sh down   # stop it
set -euo pipefail
MOTO_VERSION=${MOTO_VERSION:-5.2.5}
PORT=${CAPSTAN_MOTO_PORT:-5055}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/capstan/moto-$MOTO_VERSION
RUN=${CAPSTAN_MOTO_DIR:-/tmp/capstan-moto}

die() { echo "moto.sh: $*" >&2; exit 1; }

install() {
  if [[ -f $CACHE/.installed ]]; then
    return
  fi
  echo "installing moto[server]==$MOTO_VERSION into $CACHE" >&2
  rm -rf "$CACHE"
  python3 -m venv "$CACHE" || die "python3 -m venv failed"
  "$CACHE/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2 \
    || { rm -rf "$CACHE"; die "pip install moto[server]==$MOTO_VERSION failed"; }
  touch "$CACHE/.installed"
}

up() {
  install
  mkdir -p "$RUN"
  local url=http://127.0.0.1:$PORT
  if [[ -f $RUN/pid ]] && kill -0 "$(cat "$RUN/pid")" 2>/dev/null; then
    echo "$url"
    return
  fi
  setsid "$CACHE/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$RUN/moto.log" 2>&1 < /dev/null &
  echo $! >"$RUN/pid"
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "$url/moto-api/" 2>/dev/null; then
      echo "$url"
      return
    fi
    sleep 0.1
  done
  cat "$RUN/moto.log" >&2
  die "moto did not answer on $url"
}

down() {
  if [[ -f $RUN/pid ]]; then
    kill "$(cat "$RUN/pid")" 2>/dev/null || true
    rm -f "$RUN/pid"
  fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
