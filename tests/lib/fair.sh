# The fair-limits tests' setup (server_fair_limits.sh, server_fair_flood.sh):
# three submit tokens, an input, a 600 KiB upload, a config with a quick and
# a 60 s pipeline, and the helpers below. Sourced after lib/server.sh.
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
unset EBB_TOKEN
A=submit-token-aaaaaaaaaaaaaaaa B=submit-token-bbbbbbbbbbbbbbbb C=submit-token-cccccccccccccccc
printf '%s submit\n%s submit\n%s submit\n' "$A" "$B" "$C" > "$T/tokens"
chmod 600 "$T/tokens"
echo x > "$T/input.txt"
head -c 614400 /dev/urandom > "$T/up.bin" # 600 KiB
cat > "$T/cfg.json" <<'EOF'
{"pipelines": {"syn": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1}}]},
  "long": {"stages": [{"stage": "synthetic", "options": {"weights_mib": 1, "run_ms": 60000}}]}}}
EOF
# post TOKEN PIPELINE: a JSON job; sets CODE and BODY
post() {
  req POST /v1/jobs -H "Authorization: Bearer $1" -d "{\"pipeline\": \"$2\", \"input\": \"$T/input.txt\"}"
}
# upload TOKEN: the 600 KiB file as a job's upload; sets CODE, BODY, HDR
upload() {
  BODY=$(curl -s -D "$T/hdr" -o - -w '\n%{http_code}' -X POST "$URL/v1/jobs" \
    -H "Authorization: Bearer $1" -F pipeline=syn -F "file=@$T/up.bin;type=application/octet-stream")
  CODE=${BODY##*$'\n'} BODY=${BODY%$'\n'*}
}
# refused WHAT STATUS CODE FLAG: the last answer is that refusal
refused() {
  [ "$CODE" = "$2" ] || { fail "$1: HTTP $CODE, expected $2: $BODY"; return 1; }
  [ "$(jget "$BODY" '["error"]["code"]')" = "$3" ] || fail "$1: code is not $3: $BODY"
  case $(jget "$BODY" '["error"]["message"]') in *"$4 "*) ;; *) fail "$1: the message does not name $4: $BODY" ;; esac
  echo "--- $1: $CODE $(jget "$BODY" '["error"]["message"]')"
}
# hold: the long job runs (the device is busy until the server stops)
hold() {
  post "$A" long
  [ "$CODE" = 202 ] || { fail "the long job: $CODE $BODY"; return 1; }
  wait_log "$1" "running pipeline 'long'" || fail "the long job never ran"
}

