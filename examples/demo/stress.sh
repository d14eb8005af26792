#!/usr/bin/env bash
# Runs `make run` RUNS times (default 20) while BUSY busy loops (default 2)
# compete for the cores, and checks each transcript with check.sh. Prints
# one line per run and the count of runs that told the whole story; the
# transcripts of failed runs are kept in OUT (default a temporary directory).
#   examples/demo/stress.sh            # 20 runs, 2 busy loops
#   RUNS=5 BUSY=0 examples/demo/stress.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=${RUNS:-20} busy=${BUSY:-2}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/offload-demo-stress.XXXXXX")}
mkdir -p "$out"
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop EXIT
for ((i = 0; i < busy; i++)); do
  (while :; do :; done) &
  pids+=($!)
done
ok=0
for ((i = 1; i <= runs; i++)); do
  log=$out/run-$i.txt
  start=$SECONDS
  make -C "$root" --no-print-directory run >"$log" 2>&1
  code=$?
  if verdict=$("$here/check.sh" "$log" 2>&1) && [ "$code" -eq 0 ]; then
    ok=$((ok + 1))
    rm -f "$log"
  else
    verdict="exit $code; $verdict; transcript: $log"
  fi
  printf 'run %d: %ds: %s\n' "$i" $((SECONDS - start)) "$verdict"
done
echo "$ok of $runs runs told the whole story (busy loops: $busy)"
[ "$ok" -eq "$runs" ]
