#!/usr/bin/env bash
# src/, include/ and the fake GPU's C (tests/fakegpu/*.c, *.h) are laid out
# as the committed .clang-format says (issues 34, 41):
# scripts/format-check.sh names each file clang-format would change and how
# many places; `make format` fixes them. clang-format is installed by
# scripts/install-deps.sh, so a missing one fails the test too.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
"$root/scripts/format-check.sh"
rc=$?
[ "$rc" = 0 ] || echo "build_format: FAIL (format-check exit $rc; run 'make format')" >&2
exit "$rc"
