#!/usr/bin/env bash
# Runs every test of python/: the rtgt package's pytest suite against live `rtgt serve`
# daemons, the Ansible collection's unit tests, `ansible-test sanity` (offline), and the
# Ansible integration playbooks against a live daemon.
#
# The rtgt binary is the caller's: $RTGT_BIN, else $CARGO_TARGET_DIR (or target/)
# debug|release (build it with `cargo build -p rtgt`). Python packages go into a venv,
# $RTGT_PY_VENV (default: <target dir>/py-venv), created on first use.
#
# Usage: python/tests/run.sh [pytest arguments...]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$(cd "$HERE/.." && pwd)
ROOT=$(cd "$PY/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${RTGT_PY_VENV:-$TARGET_DIR/py-venv}

if [ -z "${RTGT_BIN:-}" ]; then
  for kind in debug release; do
    if [ -x "$TARGET_DIR/$kind/rtgt" ] && { [ -z "${RTGT_BIN:-}" ] || [ "$TARGET_DIR/$kind/rtgt" -nt "$RTGT_BIN" ]; }; then
      RTGT_BIN="$TARGET_DIR/$kind/rtgt"
    fi
  done
fi
if [ -z "${RTGT_BIN:-}" ] || [ ! -x "$RTGT_BIN" ]; then
  echo "python/tests/run.sh: rtgt binary not found in $TARGET_DIR/{debug,release}; run 'cargo build -p rtgt' first or set RTGT_BIN" >&2
  exit 1
fi
export RTGT_BIN

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" || { echo "cannot create a venv at $VENV" >&2; exit 1; }
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt" || exit 1
python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$PY" || exit 1
echo "python: $(python --version), $(ansible --version | head -1), rtgt binary $RTGT_BIN"

declare -a RESULTS
failed=0
step() {  # $1: name, rest: command
  local name=$1 t0 r
  shift
  echo
  echo "---------- $name ----------"
  t0=$(date +%s)
  if "$@"; then r=PASS; else r=FAIL; failed=$((failed + 1)); fi
  RESULTS+=("$(printf '%-5s %-22s %4ss' "$r" "$name" $(( $(date +%s) - t0 )))")
}

run_pytest() {
  cd "$PY" && PYTHONPATH="$PY${PYTHONPATH:+:$PYTHONPATH}" python -m pytest -p no:cacheprovider \
    tests ansible_collections/rtgt/target/tests/unit "$@"
}

run_sanity() {
  local log
  log=$(mktemp)
  "$HERE/ansible_sanity.sh" >"$log" 2>&1
  local rc=$?
  # ansible-test prints nothing on success but one line per test; show the verdict lines.
  grep -E '^(ERROR|FATAL|WARNING: Skipping)' "$log" || true
  local n
  n=$(grep -c '^Running sanity test' "$log")
  if [ $rc -eq 0 ]; then
    echo "ansible-test sanity: $n tests run, all passed"
  else
    echo "ansible-test sanity: FAILED (full log below)"
    cat "$log"
  fi
  rm -f "$log"
  return $rc
}

run_integration() {
  "$PY/ansible_collections/rtgt/target/tests/integration/targets/rtgt_modules/runme.sh" 2>&1 |
    grep -vE '^(TASK|PLAY \[|ok: \[|changed: \[|skipping: \[|included:)|^\*+$|^$' | cut -c1-240
  return "${PIPESTATUS[0]}"
}

step "pytest" run_pytest "$@"
step "ansible-test sanity" run_sanity
step "ansible integration" run_integration

echo
echo "---------- python summary ($(( $(date +%s) - start ))s) ----------"
printf '%s\n' "${RESULTS[@]}"
[ "$failed" -eq 0 ]
