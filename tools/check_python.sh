#!/usr/bin/env bash
# Checks that kernforge installs and runs on another declared Python version (pyproject's
# classifiers): a fresh venv, a non-editable install, `kernforge --help`, the CPU demo's
# quick path and the tests that need no compiler-heavy setup.
#   tools/check_python.sh 3.12
# Skips (exit 0, saying so) when no interpreter of that version is on this machine.
set -euo pipefail
ver="${1:?usage: tools/check_python.sh VERSION (e.g. 3.12)}"
cd "$(dirname "$0")/.."
py=""
for cand in "python$ver" "$HOME/.pyenv/versions/$ver"*/bin/"python$ver"; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys' 2>/dev/null; then
        py="$cand"; break
    fi
done
if [[ -z "$py" ]]; then
    echo "check_python: no Python $ver on this machine; skipped"; exit 0
fi
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >/dev/null
"$venv/bin/pip" install -q . pytest >/dev/null
got="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$got" == "$ver" ]] || { echo "check_python: asked for $ver, venv runs $got"; exit 1; }
"$venv/bin/kernforge" --help >/dev/null
"$venv/bin/kernforge" --version
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/core tests/tune tests/harness \
    --ignore=tests/core/test_import_contracts.py
"$venv/bin/python" -c "import kernforge, sys; assert \"site-packages\" in kernforge.__file__, kernforge.__file__"
echo "check_python: Python $ver OK"
