#!/usr/bin/env bash
# Lists the C files (*.c, *.h; not the fake's .cu programs) of src/,
# include/ and tests/ (the fake GPU, unit tests, fuzzers and test support
# alike) whose layout clang-format would change
# (the committed .clang-format; Debian 12's clang-format is 14) and exits 1
# when there are any, 0 when there are none, 2 when clang-format is missing.
#   scripts/format-check.sh            check
#   scripts/format-check.sh --fix      rewrite those files in place
# CLANG_FORMAT names another binary.
set -u
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-}
if [ -z "$CF" ]; then
  for c in clang-format-14 clang-format; do
    command -v "$c" > /dev/null && { CF=$c; break; }
  done
fi
[ -n "$CF" ] || { echo "format-check: clang-format is not installed (apt-get install clang-format)" >&2; exit 2; }
ver=$("$CF" --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
[ "$ver" = 14 ] || echo "format-check: $CF is version $ver; .clang-format was tuned on 14 and others may lay out differently" >&2
mapfile -t files < <(find src include tests -name '*.[ch]' | LC_ALL=C sort)
if [ "${1:-}" = --fix ]; then
  "$CF" -i --style=file "${files[@]}"
  exit $?
fi
# --dry-run names each place it would change as FILE:LINE:COL: warning
"$CF" --dry-run --style=file "${files[@]}" 2> "${TMPDIR:-/tmp}/format-check.$$" > /dev/null
bad=$(grep -oE '^[^:]+:[0-9]+:[0-9]+: (warning|error)' "${TMPDIR:-/tmp}/format-check.$$" | cut -d: -f1 | sort | uniq -c)
rm -f "${TMPDIR:-/tmp}/format-check.$$"
if [ -n "$bad" ]; then
  echo "format-check: $(echo "$bad" | wc -l) files need formatting (changes per file; scripts/format-check.sh --fix):"
  echo "$bad" | awk '{printf "  %s (%s)\n", $2, $1}'
  exit 1
fi
echo "format-check: ${#files[@]} files formatted as .clang-format says"
