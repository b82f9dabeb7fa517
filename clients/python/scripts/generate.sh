#!/bin/sh
# Regenerates auditrec_client/vocabulary.py from the JSON Schemas of the auditrec in this
# checkout's .venv (or $AUDITREC): one command after a change to the event models.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
auditrec=${AUDITREC:-$here/../../.venv/bin/auditrec}
python=${PYTHON:-$here/../../.venv/bin/python}
schemas=$(mktemp -d)
trap 'rm -rf "$schemas"' EXIT
"$auditrec" schema --out "$schemas" >/dev/null
"$python" "$here/scripts/generate.py" "$schemas" "$here/auditrec_client/vocabulary.py"
