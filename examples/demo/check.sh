#!/usr/bin/env bash
# Checks that a transcript of `make run` (stdout and stderr together, from
# FILE or stdin) tells the whole story of the demo:
#   1. background tasks: two sleeps start in the background and complete;
#   2. the approval: write_file needs one, and it is granted, while they run;
#   3. the person's answer: once both are done the run pauses on ask_human,
#      and `agent answer` records the answer;
#   4. the resume: `agent resume` delivers the answer to the model.
# Prints "ok", or the first part missing and exits 1.
set -euo pipefail
transcript=$(cat "${1:-/dev/stdin}")
# at PART PATTERN AFTER [COUNT]: the line of the COUNT-th line matching
# PATTERN after line AFTER; a part missing ends the check.
at() {
  local part=$1 pattern=$2 after=$3 count=${4:-1} n=0 l
  for l in $(printf '%s\n' "$transcript" | grep -nE -- "$pattern" | cut -d: -f1); do
    if [ "$l" -gt "$after" ]; then
      n=$((n + 1))
      if [ "$n" -eq "$count" ]; then echo "$l"; return 0; fi
    fi
  done
  echo "missing: $part" >&2
  exit 1
}
started=$(at "background tasks started" '^⇢ sleep task [0-9A-Z]+ running in the background$' 0 2)
completed=$(at "background tasks completed" '^⇠ sleep task [0-9A-Z]+ completed after ' "$started" 2)
asked=$(at "approval asked" '^\? write_file task [0-9A-Z]+ needs approval$' "$started")
granted=$(at "approval granted" '^! write_file task [0-9A-Z]+ approved$' "$asked")
question=$(at "question for a person, once both tasks are done" '^\? ask_human task [0-9A-Z]+ waits for an answer from outside$' "$((completed > granted ? completed : granted))")
paused=$(at "pause" '^paused: the conversation waits for 1 answer' "$question")
answer=$(at "person's answer" '^\$ agent answer ' "$paused")
recorded=$(at "answer recorded" '^answer [0-9A-Z]+ recorded on ' "$answer")
resume=$(at "resume" '^\$ agent resume ' "$recorded")
at "answer delivered on resume" '^← ask_human success: #releases on the team chat$' "$resume" >/dev/null
echo ok
