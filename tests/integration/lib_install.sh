#!/usr/bin/env bash
# `cmake --install` into a temporary prefix gives bin/, lib/libebb.so,
# include/ebb/ and lib/pkgconfig/ebb.pc; a C program built against that tree
# with nothing but `pkg-config --cflags --libs ebb` runs on the fake GPU and
# its figures match fakegpu-smi (tests/lib/embed_app.c). libebb.so exports
# only ebb_ names.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}"
. "$(dirname "$0")/../lib/common.sh"
P=$T/prefix
cmake --install "$EBB_BUILD_DIR" --prefix "$P" > "$T/install.log" 2>&1 ||
  { cat "$T/install.log"; echo "FAIL: cmake --install exited $?" >&2; exit 1; }
for f in bin/ebb bin/ebb-worker lib/libebb.so include/ebb/ebb.h include/ebb/error.h \
         include/ebb/stage.h lib/pkgconfig/ebb.pc; do
  [ -e "$P/$f" ] || fail "cmake --install did not install $f"
done
# exports: the API and nothing of the rooms' internals (or of libc)
bad=$(nm -D --defined-only "$P/lib/libebb.so" | awk '$2 ~ /^[TDBRVW]$/ && $3 !~ /^ebb_/ {print $3}' |
      grep -v '^EBB_1' || true)
[ -z "$bad" ] || fail "libebb.so exports non-ebb_ symbols: $bad"
for internal in ebb_mem_alloc ebb_device_open ebb_allocator_create ebb_log; do
  nm -D --defined-only "$P/lib/libebb.so" | grep -qw "$internal" &&
    fail "libebb.so exports the internal $internal"
done
# every function the version script names is there (a function the library
# only passes through is not pulled from the static rooms unless asked for)
for s in $(grep -oE '\bebb_[a-z_]+;' "$EBB_SOURCE_DIR/src/lib/libebb.map" | tr -d ';'); do
  nm -D --defined-only "$P/lib/libebb.so" | grep -q " $s@@EBB_1\.[0-9]*\$" ||
    fail "libebb.so does not export $s (a version EBB_1.N)"
done

export PKG_CONFIG_PATH=$P/lib/pkgconfig
flags=$(pkg-config --cflags --libs ebb) || { echo "FAIL: pkg-config --cflags --libs ebb" >&2; exit 1; }
echo "pkg-config: $flags"
pkg-config --modversion ebb | grep -q '^[0-9]' || fail "pkg-config --modversion ebb"
# an ASan build's library needs the program to carry the same runtime
extra=""
grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null &&
  extra="-fsanitize=address,undefined"
# built from a copy outside the source tree: only the installed headers are found
cp "$EBB_SOURCE_DIR/tests/lib/embed_app.c" "$EBB_SOURCE_DIR/tests/lib/smi.h" \
   "$EBB_SOURCE_DIR/tests/test.h" "$T/"
cc -std=c17 -Wall -Wextra -Werror $extra -o "$T/embed_app" "$T/embed_app.c" $flags \
  > "$T/cc.log" 2>&1 || { cat "$T/cc.log"; fail "the program does not build against the installed tree"; }
if [ -x "$T/embed_app" ]; then
  # no LD_LIBRARY_PATH: the pkg-config flags must be enough to run it
  ldd "$T/embed_app" | grep -q "libebb.so.1 => $P/" || fail "embed_app does not load libebb from $P: $(ldd "$T/embed_app" | grep ebb)"
  "$T/embed_app" || fail "embed_app failed"
fi
[ $fails -eq 0 ] && echo "lib_install: ok"
exit $((fails > 0))
