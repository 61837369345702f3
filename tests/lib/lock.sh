# Sourced by every integration test that uses $EBB_TEST_TMP (common.sh does
# it for the tests that source that), before it empties it.
#
# EBB_TEST_TMP (and FAKEGPU_STATE) are named after the test in its build
# directory, so two runs of one test in one build directory (`make test`
# while a `ctest -R` of the same test runs there) would share them: the
# second one's `rm -rf` deleted the first's files under its running server
# (server_upload failed once so: its session item's directory vanished
# mid-item). A run holds an exclusive flock on $EBB_TEST_TMP.lock for its
# whole life (its children inherit it: a process a run leaves behind may
# still use the directory, so it holds the lock too), and a second run waits
# for it (up to EBB_TEST_LOCK_WAIT_S, 900 s) first.
: "${EBB_TEST_TMP:?}"
mkdir -p "$(dirname "$EBB_TEST_TMP")"
exec {EBB_TEST_LOCK_FD}>"$EBB_TEST_TMP.lock"
if ! flock -n "$EBB_TEST_LOCK_FD"; then
  echo "note: another run of this test uses $EBB_TEST_TMP; waiting for it to end" >&2
  flock -w "${EBB_TEST_LOCK_WAIT_S:-900}" "$EBB_TEST_LOCK_FD" ||
    { echo "FAIL: another run of this test held $EBB_TEST_TMP.lock for ${EBB_TEST_LOCK_WAIT_S:-900} s" >&2; exit 1; }
fi
