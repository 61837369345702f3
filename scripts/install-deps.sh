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
  # songtrace on real instrument samples (bench/songtrace_real.py, test
  # stages_songtrace_real): a GM soundfont rendered by fluidsynth, scored by
  # mir_eval (PyPI, below) on Debian's numpy/scipy for /usr/bin/python3
  fluidsynth fluid-soundfont-gm python3-numpy python3-scipy python3-pip
)

# mir_eval (PyPI only: Debian has no package) for /usr/bin/python3, the
# interpreter bench/songtrace_real.py runs under.
pip_mir_eval() {
  /usr/bin/python3 -c 'import mir_eval' 2>/dev/null && return 0
  echo "install-deps: installing mir_eval for /usr/bin/python3 (pip)"
  /usr/bin/python3 -m pip install -q --break-system-packages mir_eval ||
    echo "install-deps: pip could not install mir_eval; stages_songtrace_real will fail" >&2
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  [ "$(id -u)" -eq 0 ] && pip_mir_eval
  exit 0
fi

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
[ "$(id -u)" -eq 0 ] && pip_mir_eval
exit 0
