#!/bin/bash
# Client, gateway and simulator Go benchmarks of two checkouts, alternated
# in one run (this machine is shared and noisy): BEFORE=DIR [AFTER=DIR].
set -u
B=${BEFORE:?set BEFORE to a checkout of the commit before}; N=${AFTER:-.}
run() { # label dir pkg bench benchtime
  (cd $2 && go test $3 -run '^$' -bench "$4" -benchtime $5 -count 1 2>&1 | grep -E "^Benchmark" | sed "s#^#$1 #")
}
for round in 1 2 3; do
  echo "== round $round  load $(cut -d' ' -f1-3 /proc/loadavg)"
  run base $B ./internal/bench 'ClientPerRequest' 3000x
  run new  $N ./internal/bench 'ClientPerRequest' 3000x
  run base $B ./internal/gateway/sched 'BenchmarkPick$' 20000x
  run new  $N ./internal/gateway/sched 'BenchmarkPick$' 20000x
  run base $B ./internal/gateway 'TranslateStream|ParseRequest$|AccessLog' 20000x
  run new  $N ./internal/wire/translate 'TranslateStream' 20000x
  run new  $N ./internal/gateway 'ParseRequest$|AccessLog' 20000x
  run base $B ./internal/gateway 'StreamRoundTrip' 2000x
  run new  $N ./internal/gateway 'StreamRoundTrip' 2000x
  run base $B ./internal/sim 'Run100k' 3x
  run new  $N ./internal/sim 'Run100k' 3x
done
