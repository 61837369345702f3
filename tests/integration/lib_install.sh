#!/usr/bin/env bash
# `cmake --install` into a temporary prefix gives bin/, <libdir>/libebb.so,
# include/ebb/, <libdir>/pkgconfig/ebb.pc (no rpath, no placeholder URL) and
# <libdir>/cmake/ebb/ (ebbConfig.cmake, its version file, ebb::ebb).
# The public contract is exact: the functions the installed include/ebb/*.h
# declare (non-inline; read by the compiler with -aux-info) are the
# functions libebb.so exports (nm -D), both ways; stage.h declares none (a
# plugin links against nothing of ebb). tests/lib/embed_app.c, built from a
# copy outside the source tree once with `pkg-config --cflags --libs ebb`
# and once with find_package(ebb) (tests/lib/find_package), references
# every declared function, runs on the fake GPU, and its figures match
# fakegpu-smi.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}"
. "$(dirname "$0")/../lib/common.sh"
for tool in nm pkg-config cmake cc; do
  command -v $tool > /dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done
P=$T/prefix
cmake --install "$EBB_BUILD_DIR" --prefix "$P" > "$T/install.log" 2>&1 ||
  { cat "$T/install.log"; echo "FAIL: cmake --install exited $?" >&2; exit 1; }
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$EBB_BUILD_DIR/CMakeCache.txt")
[ -n "$libdir" ] || fail "CMakeCache.txt has no CMAKE_INSTALL_LIBDIR (GNUInstallDirs not used?)"
libdir=${libdir:-lib}
for f in bin/ebb bin/ebb-worker "$libdir/libebb.so" "$libdir/libebb.so.1" include/ebb/ebb.h \
         include/ebb/error.h include/ebb/error_codes.h include/ebb/stage.h \
         "$libdir/pkgconfig/ebb.pc" "$libdir/cmake/ebb/ebbConfig.cmake" \
         "$libdir/cmake/ebb/ebbConfigVersion.cmake" "$libdir/cmake/ebb/ebbTargets.cmake"; do
  [ -e "$P/$f" ] || fail "cmake --install did not install $f"
done
LIB=$P/$libdir/libebb.so

# --- ebb.pc: where a program finds libebb at run time is its own choice
pc=$P/$libdir/pkgconfig/ebb.pc
grep -n 'rpath' "$pc" && fail "ebb.pc carries an rpath"
grep -nE '^URL: *https?://github\.com/ebb/?$' "$pc" && fail "ebb.pc carries the placeholder URL"

# --- exports: the API and nothing of the rooms' internals (or of libc)
nm -D --defined-only "$LIB" > "$T/nm.txt" || fail "nm -D $LIB failed"
bad=$(awk '$2 ~ /^[TDBRVW]$/ && $3 !~ /^ebb_/ {print $3}' "$T/nm.txt" | grep -v '^EBB_1' || true)
[ -z "$bad" ] || fail "libebb.so exports non-ebb_ symbols: $bad"
awk '$2 ~ /^[TDBRVW]$/ {print $3}' "$T/nm.txt" | sed 's/@.*//' | sort -u > "$T/exported.txt"
# every function the version script names is there, in a node EBB_1.N (a
# function the library only passes through is not pulled from the static
# rooms unless asked for)
for s in $(grep -oE '\bebb_[a-z_0-9]+;' "$EBB_SOURCE_DIR/src/lib/libebb.map" | tr -d ';'); do
  grep -q " $s@@EBB_1\.[0-9]*\$" "$T/nm.txt" || fail "libebb.so does not export $s (a version EBB_1.N)"
done

# --- declared == exported: the compiler lists what the installed headers
# declare (-aux-info: one line per function, `extern` for a declaration,
# `static` for an inline wrapper)
declared_by() { # FILE.c OUT: the extern functions the installed headers declare to FILE.c
  cc -std=c17 -I"$P/include" -fsyntax-only -aux-info "$2.aux" "$1" > "$2.log" 2>&1 ||
    { cat "$2.log"; fail "the installed headers do not compile alone ($1)"; }
  grep -F "/* $P/include/ebb/" "$2.aux" | grep -F ' */ extern ' |
    sed -E 's/^.*\*\/ extern [^(]*[ *]([A-Za-z_][A-Za-z0-9_]*) \(.*$/\1/' | sort -u > "$2"
}
: > "$T/all_headers.c"
for h in "$P"/include/ebb/*.h; do echo "#include <ebb/$(basename "$h")>" >> "$T/all_headers.c"; done
declared_by "$T/all_headers.c" "$T/declared.txt"
echo "--- the installed headers declare $(wc -l < "$T/declared.txt") functions; libebb.so exports $(wc -l < "$T/exported.txt")"
[ -s "$T/declared.txt" ] || fail "found no declared function in $P/include/ebb (the -aux-info parse is broken)"
missing=$(comm -23 "$T/declared.txt" "$T/exported.txt" | tr '\n' ' ')
[ -z "$missing" ] || fail "declared in include/ebb but not exported by libebb.so (a program calling them fails to link): $missing"
extra=$(comm -13 "$T/declared.txt" "$T/exported.txt" | tr '\n' ' ')
[ -z "$extra" ] || fail "exported by libebb.so but declared in no installed header: $extra"
# a plugin sees only stage.h (and what it includes): no function to link against
echo '#include <ebb/stage.h>' > "$T/plugin.c"
declared_by "$T/plugin.c" "$T/plugin_declared.txt"
[ ! -s "$T/plugin_declared.txt" ] ||
  fail "stage.h offers plugins functions the host does not export: $(tr '\n' ' ' < "$T/plugin_declared.txt")"

# --- the consumers, built from copies outside the source tree (only the
# installed headers are found)
# an ASan build's library needs the program to carry the same runtime
san=""
grep -q '^EBB_SANITIZE:BOOL=ON' "$EBB_BUILD_DIR/CMakeCache.txt" 2>/dev/null &&
  san="-fsanitize=address,undefined"
mkdir -p "$T/src"
cp "$EBB_SOURCE_DIR/tests/lib/embed_app.c" "$EBB_SOURCE_DIR/tests/lib/smi.h" \
   "$EBB_SOURCE_DIR/tests/test.h" "$EBB_SOURCE_DIR/tests/lib/find_package/CMakeLists.txt" "$T/src/"
check_app() { # HOW BINARY: links libebb from $P, calls every declared function, passes
  ldd "$2" | grep -q "libebb.so.1 => $P/" ||
    fail "$1: embed_app does not load libebb from $P: $(ldd "$2" | grep ebb)"
  nm -D --undefined-only "$2" | awk '{print $NF}' | sed 's/@.*//' | sort -u > "$T/$1.calls"
  uncalled=$(comm -23 "$T/declared.txt" "$T/$1.calls" | tr '\n' ' ')
  [ -z "$uncalled" ] || fail "$1: embed_app does not call $uncalled (tests/lib/embed_app.c)"
  mkdir -p "$T/$1.scratch"
  "$2" "$T/$1.scratch" || fail "$1: embed_app failed"
}

export PKG_CONFIG_PATH=$P/$libdir/pkgconfig
flags=$(pkg-config --cflags --libs ebb) || { echo "FAIL: pkg-config --cflags --libs ebb" >&2; exit 1; }
echo "pkg-config: $flags"
pkg-config --modversion ebb | grep -q '^[0-9]' || fail "pkg-config --modversion ebb"
# ebb.pc has no rpath: this program chooses to carry one (no LD_LIBRARY_PATH)
rpath="-Wl,-rpath,$(pkg-config --variable=libdir ebb)"
if cc -std=c17 -Wall -Wextra -Werror $san -o "$T/embed_app" "$T/src/embed_app.c" $flags $rpath \
     > "$T/cc.log" 2>&1; then
  check_app pkg-config "$T/embed_app"
else
  cat "$T/cc.log"; fail "pkg-config: the program does not build against the installed tree"
fi

if cmake -S "$T/src" -B "$T/fp" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" > "$T/fp.log" 2>&1 &&
   cmake --build "$T/fp" >> "$T/fp.log" 2>&1; then
  grep -q "ebb_DIR:PATH=$P/$libdir/cmake/ebb" "$T/fp/CMakeCache.txt" ||
    fail "find_package(ebb) did not find the installed package: $(grep ebb_DIR "$T/fp/CMakeCache.txt")"
  check_app find_package "$T/fp/embed_app"
else
  cat "$T/fp.log"; fail "find_package: the program does not build against the installed tree"
fi

[ $fails -eq 0 ] && echo "lib_install: ok"
exit $((fails > 0))
