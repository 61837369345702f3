#!/usr/bin/env bash
# The C of src/, include/ and tests/ (the fake GPU's, the unit tests', the
# fuzzers' and the support files': *.c, *.h) is laid out as the committed
# .clang-format says (issues 34, 41, 46):
# scripts/format-check.sh names each file clang-format would change and how
# many places; `make format` fixes them. clang-format is installed by
# scripts/install-deps.sh, so a missing one fails the test too.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
"$root/scripts/format-check.sh"
rc=$?
[ "$rc" = 0 ] || echo "build_format: FAIL (format-check exit $rc; run 'make format')" >&2
exit "$rc"
