#!/usr/bin/env bash
# `ebb_` means public (issue 34, DESIGN.md "How we write C here"): no object
# built from src/ defines a global symbol named ebb_* unless the public
# headers (include/ebb/*.h) declare it or libebb.so exports it
# (src/lib/libebb.map). A cross-file internal carries its room's prefix
# (base_, brk_, dev_, mem_, pl_, stg_, wrk_, srv_, cli_, lib_; mem__ within
# the memory room); a file-local one is static. The objects are read with
# nm, so a name made by a macro or ## is seen as the linker sees it.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
command -v nm > /dev/null || { echo "FAIL: nm (binutils) is not installed" >&2; exit 1; }

# the public names: every ebb_ identifier the public headers write, and the
# library's export list
{
  cat "$EBB_SOURCE_DIR"/include/ebb/*.h
  sed 's#/\*.*\*/##' "$EBB_SOURCE_DIR/src/lib/libebb.map"
} | grep -oE '\bebb_[A-Za-z0-9_]+' | sort -u > "$T/public"
[ -s "$T/public" ] || fail "no public names found in include/ebb/*.h"

# the objects of src/: the rooms' archives (libebb_<room>.a holds today's
# objects, generated ones included) and the programs' and libebb.so's own
# objects whose source still exists (CMake's layout:
# BUILD/src/X/CMakeFiles/T.dir/REL.o)
n=0
: > "$T/defined"
for lib in "$EBB_BUILD_DIR"/src/*/libebb_*.a; do
  [ -f "$lib" ] || continue
  n=$((n + $(ar t "$lib" | wc -l)))
  nm -A -P --defined-only -g "$lib" 2>/dev/null |
    awk '{ sym = $2; f = $1; sub(/:$/, "", f); if (sym ~ /^ebb_/) print sym, f }' >> "$T/defined"
done
while IFS= read -r obj; do
  rel=${obj#"$EBB_BUILD_DIR"/}
  dir=${rel%%/CMakeFiles/*}
  srcrel=${rel#*/CMakeFiles/*.dir/}
  [ -f "$EBB_SOURCE_DIR/$dir/${srcrel%.o}" ] || continue
  n=$((n + 1))
  nm -P --defined-only -g "$obj" | awk -v f="$dir/${srcrel%.o}" '$1 ~ /^ebb_/ {print $1, f}' >> "$T/defined"
done < <(find "$EBB_BUILD_DIR/src/cli" "$EBB_BUILD_DIR/src/lib" -path '*/CMakeFiles/*' -name '*.o' \
           ! -path '*_layering.dir/*' 2>/dev/null | sort)
[ "$n" -gt 50 ] || fail "only $n objects of src/ found under $EBB_BUILD_DIR/src: is the tree built?"
echo "--- $n objects of src/, $(wc -l < "$T/public") public names"

sort -u "$T/defined" | while read -r sym file; do
  grep -qxF "$sym" "$T/public" ||
    echo "$sym (defined in $file)"
done > "$T/internal"
if [ -s "$T/internal" ]; then
  fail "$(wc -l < "$T/internal") internal global(s) named ebb_* as if public; give each its room's prefix (or make it static): $(head -20 "$T/internal" | tr '\n' ';')"
fi

# A cross-file internal is used across files: every global an object of src/
# defines is referenced by another object (of src/, the tests, bench/ or
# tools/), or is public; one used only where it is defined is static, and one
# used nowhere goes. Allowed: main, the separate stage's kernel twins
# (fakegpu_twin_*), which the fake looks up by name with dlsym, and the
# compiler's own names (__*: a sanitizer build's __odr_asan.X).
find "$EBB_BUILD_DIR" \( -name '*.o' -o -name '*.a' \) ! -path '*_layering.dir/*' ! -path '*/fakegpu/*' \
  -print0 | xargs -0 nm -P -g --undefined-only 2>/dev/null | awk '{print $1}' | sort -u > "$T/referenced"
[ "$(wc -l < "$T/referenced")" -gt 500 ] || fail "only $(wc -l < "$T/referenced") referenced names found: is the tree built?"
: > "$T/globals"
for lib in "$EBB_BUILD_DIR"/src/*/libebb_*.a; do
  [ -f "$lib" ] && nm -A -P --defined-only -g "$lib" 2>/dev/null |
    awk '$3 ~ /^[TDBR]$/ { f = $1; sub(/:$/, "", f); sub(/.*\[/, "", f); sub(/\]$/, "", f); print $2, f }' >> "$T/globals"
done
sort -u "$T/globals" | while read -r sym file; do
  case $sym in main | fakegpu_twin_* | __*) continue ;; esac # __*: the compiler's (ASan's __odr_asan.X)
  grep -qxF "$sym" "$T/public" && continue
  grep -qxF "$sym" "$T/referenced" || echo "$sym ($file)"
done > "$T/lonely"
if [ -s "$T/lonely" ]; then
  fail "$(wc -l < "$T/lonely") global(s) of src/ referenced by no other object: make each static (or remove it when nothing calls it): $(head -20 "$T/lonely" | tr '\n' ';')"
fi
echo "--- $(sort -u "$T/globals" | wc -l) globals of the rooms' archives, each used by another object"

# the check itself: the public names are defined (else it would pass on an
# empty build)
grep -q '^ebb_strerror ' "$T/defined" || fail "ebb_strerror (public) is not among the defined symbols: the scan is broken"

[ $fails -eq 0 ] && echo "build_internal_names: ok"
exit $((fails > 0))
