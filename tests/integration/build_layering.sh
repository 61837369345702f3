#!/usr/bin/env bash
# The build keeps the rooms honest (cmake/EbbRooms.cmake): a room's static
# library may call only the rooms below it, and an upward call fails to link.
#  - every room of this build passed its own link check (ebb_<room>_layering
#    was linked: the room's every object against the rooms below it alone);
#  - a scratch room at the device's level (tests/support/layering) that calls
#    the memory room's mem_allocator_create: a program linking every room
#    links it anyway (the hole static libraries leave), but the room's link
#    check FAILS, naming the function; the same room calling the base room's
#    ebb_seterr (downward) builds, check included.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
command -v cmake > /dev/null || { echo "FAIL: cmake is not installed" >&2; exit 1; }

for room in base broker device memory stages worker pipeline server; do
  [ -x "$EBB_BUILD_DIR/src/$room/ebb_${room}_layering" ] ||
    fail "room $room: its link check ebb_${room}_layering was not built"
done

# the scratch project is built like this build: same compiler, and the
# sanitizers when the rooms' archives were built with them
cache=$EBB_BUILD_DIR/CMakeCache.txt
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$cache")
args=(-DEBB_SOURCE_DIR="$EBB_SOURCE_DIR" -DEBB_BUILD_DIR="$EBB_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release)
[ -n "$cc" ] && args+=(-DCMAKE_C_COMPILER="$cc")
if grep -q '^EBB_SANITIZE:BOOL=ON' "$cache"; then
  args+=(-DCMAKE_C_FLAGS=-fsanitize=address,undefined -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined)
fi

configure() {  # configure DIR up|down
  cmake -S "$EBB_SOURCE_DIR/tests/support/layering" -B "$T/$1" "${args[@]}" -DPROBE_CALL="$2" \
    > "$T/$1.configure.log" 2>&1 || { fail "$1: configure failed: $(tail -20 "$T/$1.configure.log")"; return 1; }
}

# upward
if configure up up; then
  cmake --build "$T/up" --target probe_program > "$T/up.program.log" 2>&1 ||
    fail "up: the program linking every room should link (the static-library hole): $(tail -20 "$T/up.program.log")"
  if cmake --build "$T/up" --target ebb_probe_layering > "$T/up.check.log" 2>&1; then
    fail "up: the probe room calls the memory room above it, yet its link check linked"
  else
    grep -q "undefined reference to .mem_allocator_create" "$T/up.check.log" ||
      fail "up: the link check failed without naming mem_allocator_create: $(tail -20 "$T/up.check.log")"
    echo "--- upward call refused: $(grep -m1 'undefined reference' "$T/up.check.log")"
  fi
  cmake --build "$T/up" > "$T/up.all.log" 2>&1 && fail "up: the whole scratch build succeeded"
fi

# downward (control)
if configure down down; then
  cmake --build "$T/down" > "$T/down.all.log" 2>&1 ||
    fail "down: a downward call should build, link check included: $(tail -20 "$T/down.all.log")"
  [ -x "$T/down/ebb_probe_layering" ] || fail "down: no ebb_probe_layering was linked"
fi

[ $fails -eq 0 ] && echo "build_layering: ok"
exit $((fails > 0))
