#!/bin/bash
# Restart one of two simulator replicas behind the gateway mid-run; count failures.
set -u
T=${TTFT_BIN:-./ttft}; D=$(mktemp -d); export HOME=$D
$T sim serve --port 18101 > $D/a.log 2>&1 & A=$!
$T sim serve --port 18102 > $D/b.log 2>&1 & B=$!
sleep 1
$T gateway --listen 127.0.0.1:18100 --backend http://127.0.0.1:18101 --backend http://127.0.0.1:18102 --no-access-log > $D/gw.log 2>&1 & G=$!
sleep 1
$T bench --target http://127.0.0.1:18100 -c 16 --duration 16s --max-tokens 32 --no-progress --no-store --out $D/run > $D/bench.log 2>&1 & BE=$!
sleep 5; kill -9 $B; echo "killed replica b at $(date +%T.%N)"
sleep 2; $T sim serve --port 18102 > $D/b2.log 2>&1 & B=$!; echo "restarted b at $(date +%T.%N)"
wait $BE; echo "bench exit $?"
grep -E "requests:|errors" $D/bench.log
python3 - "$D/run/requests.jsonl" <<'PY'
import json,sys
recs=[json.loads(l) for l in open(sys.argv[1])]
fails=[r for r in recs if r.get("error_class")]
print(len(recs),"requests,",len(fails),"failed")
for r in fails[:20]: print(r["sent"][11:23], r["error_class"], r.get("error","")[:100])
PY
curl -s 127.0.0.1:18100/metrics | grep -E "^ttft_gateway_requests_total" | head; kill $G $A $B 2>/dev/null; wait 2>/dev/null
