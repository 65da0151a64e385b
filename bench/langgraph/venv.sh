#!/usr/bin/env bash
# Creates bench/langgraph/.venv (gitignored) from the pinned requirements.txt, once, and
# prints the path of its python. Re-run after requirements.txt changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
