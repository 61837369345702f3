#!/usr/bin/env bash
# The broker's 500-operation soak (issue 35): tests/integration/broker_soak.py
# on one fake 16 GiB device (ctest label "long": `make test-long`).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_MEMORY_MIB=16384 FAKEGPU_CONTEXT_MIB=300 EBB_TEST_TMP="$T"
exec python3 "$(dirname "$0")/broker_soak.py" "$@"
