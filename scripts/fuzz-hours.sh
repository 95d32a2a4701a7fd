#!/bin/bash
# Runs every FuzzXxx in the tree for a time budget each (default 60s;
# FUZZTIME=10m for the long job), one at a time, and prints the executions
# and the outcome per fuzzer. New corpus entries stay in the Go build
# cache; a failing input is written to testdata/fuzz/ by go test, where it
# becomes a seed once the bug is fixed. Not part of `go test ./...`.
set -u
budget=${FUZZTIME:-60s}
status=0
while read -r dir name; do
  out=$(go test "./$dir" -run '^$' -fuzz "^${name}\$" -fuzztime "$budget" 2>&1)
  rc=$?
  execs=$(printf '%s\n' "$out" | grep -o 'execs: [0-9]*' | tail -1 | cut -d' ' -f2)
  if [ $rc -eq 0 ]; then
    printf '%-40s %-28s ok      %s execs\n' "$dir" "$name" "${execs:-?}"
  else
    status=1
    printf '%-40s %-28s FAILED  %s execs\n' "$dir" "$name" "${execs:-?}"
    printf '%s\n' "$out" | grep -E 'Failing input|--- FAIL|panic|_test.go' | head -5 | sed 's/^/    /'
  fi
done < <(grep -rn '^func Fuzz' --include='*_test.go' internal | sed -E 's#^(internal/.*)/[^/]+_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]+)\(.*#\1 \2#' | sort -u)
exit $status
