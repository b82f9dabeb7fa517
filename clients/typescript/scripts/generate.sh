#!/bin/sh
# Regenerates src/generated/ from the JSON Schemas of the auditrec in this checkout's .venv
# (or $AUDITREC): one command after a change to the event models.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
auditrec=${AUDITREC:-$here/../../.venv/bin/auditrec}
schemas=$(mktemp -d)
trap 'rm -rf "$schemas"' EXIT
"$auditrec" schema --out "$schemas" >/dev/null
node "$here/scripts/generate-types.mjs" "$schemas" "$here/src/generated"
