#!/usr/bin/env bash
# The demo of `make run`: one conversation on the embedded default that
# shows what offload is for. Two background tasks overlap while the model
# keeps working; a file write needs an approval (granted by --approve all);
# a question goes to a person (an external tool), which pauses the run; the
# person's answer is given with `agent answer`, and `agent resume`
# finishes the conversation.
#
# Without OPENAI_API_KEY the model is scripted (run.yaml, then resume.yaml);
# with it, the same tools and prompt go to a real model. Every command is
# printed before it runs ("$ ..."), as a user would type it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
agent=${AGENT:-agent}
prompt=${PROMPT:-Ship the release.}
work=$(mktemp -d "${TMPDIR:-/tmp}/offload-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
store=$work/.offload
run_model=() resume_model=()
if [ -z "${OPENAI_API_KEY:-}" ]; then
  run_model=(--model "script:$here/run.yaml")
  resume_model=(--model "script:$here/resume.yaml")
fi
common=(--spec "$here/agent.yaml" --approve all --store "$store" --root "$work")

show() { printf '\n$ %s\n' "$*" | sed "s#$here#examples/demo#g; s#$work#\$DEMO#g" >&2; }

printf 'offload demo in DEMO=%s (removed at the end)\n' "$work" >&2
show agent run "${common[@]}" "${run_model[@]}" "\"$prompt\""
set +e
"$agent" run "${common[@]}" "${run_model[@]}" "$prompt"
code=$?
set -e
for round in 1 2 3; do
  [ "$code" -eq 3 ] || break
  show agent pending --store "$store"
  pending=$("$agent" pending --store "$store")
  printf '%s\n' "$pending"
  conv=$(printf '%s\n' "$pending" | awk '$1 == "#" && $2 == "conversation" {print $3; exit}')
  # A person answers each question; approvals were granted by --approve all.
  for task in $(printf '%s\n' "$pending" | awk '$2 == "external" {print $1}'); do
    answer='{"content":"#releases on the team chat"}'
    show agent answer --store "$store" --conversation "$conv" "$task" "'$answer'"
    "$agent" answer --store "$store" --conversation "$conv" "$task" "$answer"
  done
  show agent resume "${common[@]}" "${resume_model[@]}" --conversation "$conv"
  set +e
  "$agent" resume "${common[@]}" "${resume_model[@]}" --conversation "$conv"
  code=$?
  set -e
done
if [ -f "$work/RELEASE-NOTE.md" ]; then
  show cat RELEASE-NOTE.md
  cat "$work/RELEASE-NOTE.md"
fi
exit "$code"
