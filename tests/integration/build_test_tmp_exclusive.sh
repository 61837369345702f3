#!/usr/bin/env bash
# Two runs of one test in one build directory share its temp dir
# ($EBB_TEST_TMP) and fake GPU: tests/lib/common.sh must make the second run
# wait for the first, never `rm -rf` the first one's files under it (that is
# how server_upload once lost a session item's directory mid-item, its export
# failing with "output directory .../sessions/ID/7: No such file or
# directory"). Run A sources common.sh and writes a file in its T; run B (same
# EBB_TEST_TMP) starts while A still works; A's file must survive, and B must
# say it waited and then run.
set -u
LIB=$(cd "$(dirname "$0")/../lib" && pwd)
. "$LIB/common.sh"
export EBB_TEST_TMP=$T/shared EBB_TEST_LOCK_WAIT_S=60
run_a() {
  . "$LIB/common.sh"
  echo mine > "$T/a-file"
  for _ in $(seq 100); do [ -e "$1/b-started" ] && break; sleep 0.1; done
  [ -e "$1/b-started" ] || { echo "A: B never started" >&2; exit 2; }
  sleep 2 # B has long reached common.sh by now
  [ "$(cat "$T/a-file" 2>/dev/null)" = mine ] || { echo "A: my file in $T was deleted under me" >&2; exit 1; }
  exit 0
}
run_b() {
  touch "$1/b-started"
  . "$LIB/common.sh"
  echo ran > "$1/b-ran"
  exit 0
}
OUTER=$T
(run_a "$OUTER") 2> "$OUTER/a.err" &
a=$!
for _ in $(seq 100); do [ -e "$T/shared/a-file" ] && break; sleep 0.1; done
[ -e "$T/shared/a-file" ] || fail "run A never wrote its file: $(cat "$OUTER/a.err")"
(run_b "$OUTER") 2> "$OUTER/b.err" &
b=$!
wait $a; arc=$?
wait $b; brc=$?
[ "$arc" = 0 ] || fail "run A exited $arc: $(cat "$OUTER/a.err")"
[ "$brc" = 0 ] && [ -e "$OUTER/b-ran" ] || fail "run B exited $brc without running: $(cat "$OUTER/b.err")"
grep -q "another run of this test uses $T/shared; waiting" "$OUTER/b.err" ||
  fail "run B did not say it waited for run A: $(cat "$OUTER/b.err")"
[ "$fails" -eq 0 ] && echo "build_test_tmp_exclusive: the second run waited; the first one's files survived"
exit $((fails > 0))
