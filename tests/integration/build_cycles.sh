#!/usr/bin/env bash
# No file of a room calls another that calls it back, directly or round a
# longer circle: over each room's archive (build/src/ROOM/libebb_ROOM.a),
# which object defines which symbol and which references it (nm), the graph
# of "file A needs file B" has no cycle (tests/support/objcycles.py names
# each cycle with the symbols that make it). cmake/EbbRooms.cmake keeps the
# rooms in order among themselves, this keeps the files in order inside a
# room. Rooms checked: EBB_CYCLE_ROOMS, by default every room of src/; the
# rooms built as programs or libraries rather than archives are read from
# their objects (cli: `ebb`'s, build/src/cli/CMakeFiles/ebb.dir/*.o; lib:
# libebb.so's, build/src/lib/CMakeFiles/ebb_shared.dir/*.o).
#  - first the check itself: two objects that call each other (a.o -> b.o
#    -> a.o) are refused with the cycle named, a third that only calls them
#    is not part of it, and a chain without a circle passes.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
CHECK=$EBB_SOURCE_DIR/tests/support/objcycles.py
command -v nm > /dev/null || { echo "FAIL: nm (binutils) is not installed" >&2; exit 1; }
ROOMS=${EBB_CYCLE_ROOMS:-base broker device memory stages worker pipeline server cli lib}

# --- the check can fail ------------------------------------------------------
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$EBB_BUILD_DIR/CMakeCache.txt")
cc=${cc:-cc}
printf 'int b_fn(int);\nint a_fn(int x) { return x ? b_fn(x - 1) : 0; }\n' > "$T/a.c"
printf 'int a_fn(int);\nint b_fn(int x) { return x ? a_fn(x - 1) : 1; }\n' > "$T/b.c"
printf 'int a_fn(int);\nint b_fn(int);\nint c_fn(void) { return a_fn(1) + b_fn(1); }\n' > "$T/c.c"
printf 'int d_fn(void) { return 4; }\n' > "$T/d.c"
for f in a b c d; do
  "$cc" -c -o "$T/$f.o" "$T/$f.c" || fail "cannot compile the probe $f.c with $cc"
done
python3 "$CHECK" --name probe "$T/a.o" "$T/b.o" "$T/c.o" > "$T/probe.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "two objects calling each other: the check exited $rc, expected 1: $(cat "$T/probe.out")"
grep -q 'cycle: a.o -> b.o (b_fn) -> a.o (a_fn)' "$T/probe.out" ||
  fail "the probe's cycle is not named as a.o -> b.o (b_fn) -> a.o (a_fn): $(cat "$T/probe.out")"
grep -q 'c.o' "$T/probe.out" && fail "c.o only calls the circle, yet it is named in it: $(cat "$T/probe.out")"
echo "--- an injected cycle is refused: $(grep 'cycle:' "$T/probe.out")"
python3 "$CHECK" --name chain "$T/c.o" "$T/a.o" "$T/d.o" > "$T/chain.out" 2>&1 ||
  fail "a chain with no circle (c.o -> a.o) was refused: $(cat "$T/chain.out")"

# --- the rooms -----------------------------------------------------------------
# the objects of a room: its archive, else the objects of the program (or
# library) its directory builds
room_objects() {
  case $1 in
  cli) objs=("$EBB_BUILD_DIR"/src/cli/CMakeFiles/ebb.dir/*.o) ;;
  lib) objs=("$EBB_BUILD_DIR"/src/lib/CMakeFiles/ebb_shared.dir/*.o) ;;
  *) objs=("$EBB_BUILD_DIR/src/$1/libebb_$1.a") ;;
  esac
  local keep=() o
  for o in "${objs[@]}"; do # an object whose source is gone is left out
    case $o in *.c.o) [ -f "$EBB_SOURCE_DIR/src/$1/$(basename "${o%.o}")" ] || continue ;; esac
    keep+=("$o")
  done
  objs=("${keep[@]}")
  [ -f "${objs[0]:-}" ]
}
for room in $ROOMS; do
  room_objects "$room" || { fail "room $room: its objects (or archive) under $EBB_BUILD_DIR/src/$room were not built"; continue; }
  if python3 "$CHECK" --name "src/$room" "${objs[@]}" > "$T/$room.out" 2>&1; then
    cat "$T/$room.out"
  else
    fail "the files of src/$room call each other in a circle: $(cat "$T/$room.out")"
  fi
done
exit $((fails > 0))
