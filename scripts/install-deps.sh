#!/usr/bin/env bash
# Installs the Debian packages ebb builds and tests with. Idempotent: it only
# calls apt-get when something is missing, so `make test` stays fast.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libjansson-dev libsqlite3-dev libmicrohttpd-dev libcurl4-openssl-dev
  libsndfile1-dev libsamplerate0-dev libfftw3-dev libmpg123-dev
  python3 aubio-tools
  curl  # the curl tool: tests/integration/stages_transcribe_server.sh
  prometheus  # promtool checks /metrics: tests/integration/server_security.sh
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# An apt list that was never fetched finds nothing; update once, then install.
$SUDO apt-get update -qq || echo "install-deps: apt-get update failed; trying with the lists we have" >&2
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
