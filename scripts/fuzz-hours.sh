#!/bin/bash
# Runs every FuzzXxx in the tree for a time budget each (default 60s;
# FUZZTIME=10m for the long job), one at a time, and prints the executions
# and the outcome per fuzzer. A failing input is written to testdata/fuzz/
# by go test, where it becomes a seed once the bug is fixed. New corpus
# entries (inputs that found new coverage) land in the Go build cache;
# FUZZPARALLEL=N caps the fuzz workers (default: GOMAXPROCS).
# KEEP=N copies up to N of them per fuzzer, smallest first, into the
# package's testdata/fuzz/FuzzXxx so that `go test ./...` replays them
# from then on. Not part of `go test ./...`.
set -u
budget=${FUZZTIME:-60s}
keep=${KEEP:-0}
cache=$(go env GOCACHE)/fuzz
module=$(go list -m)
status=0
while read -r dir name; do
  out=$(go test "./$dir" -run '^$' -fuzz "^${name}\$" -fuzztime "$budget" ${FUZZPARALLEL:+-parallel "$FUZZPARALLEL"} 2>&1)
  rc=$?
  execs=$(printf '%s\n' "$out" | grep -o 'execs: [0-9]*' | tail -1 | cut -d' ' -f2)
  kept=0
  if [ "$keep" -gt 0 ] && [ -d "$cache/$module/$dir/$name" ]; then
    mkdir -p "$dir/testdata/fuzz/$name"
    while read -r f; do
      [ "$kept" -ge "$keep" ] && break
      [ -e "$dir/testdata/fuzz/$name/$(basename "$f")" ] && continue
      cp "$f" "$dir/testdata/fuzz/$name/" && kept=$((kept + 1))
    done < <(ls -Sr "$cache/$module/$dir/$name"/* 2>/dev/null)
  fi
  if [ $rc -eq 0 ]; then
    printf '%-40s %-28s ok      %s execs, %s corpus entries kept\n' "$dir" "$name" "${execs:-?}" "$kept"
  else
    status=1
    printf '%-40s %-28s FAILED  %s execs\n' "$dir" "$name" "${execs:-?}"
    printf '%s\n' "$out" | grep -E 'Failing input|--- FAIL|panic|_test.go' | head -5 | sed 's/^/    /'
  fi
done < <(grep -rn '^func Fuzz' --include='*_test.go' internal | sed -E 's#^(internal/.*)/[^/]+_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]+)\(.*#\1 \2#' | sort -u)
exit $status
