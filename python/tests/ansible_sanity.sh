#!/usr/bin/env bash
# Runs `ansible-test sanity` on the rtgt.target collection, offline.
#
# ansible-test wants to run from inside ansible_collections/NS/NAME of a git checkout, so the
# collection is copied into a scratch git repository first. Its `import` test bootstraps pip
# in a fresh venv from a get-pip script it downloads from a host CI cannot reach; a stand-in
# that uses ensurepip is put in ansible-test's cache instead (the cached name is what
# ansible-test looks for before downloading).
#
# Usage: python/tests/ansible_sanity.sh      (ansible-test on PATH, Python 3.11)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
COLLECTION=$(cd "$HERE/../ansible_collections/rtgt/target" && pwd)

cache="${HOME}/.ansible/test/cache"
mkdir -p "$cache"
for f in get_pip_24_2.py get-pip-24.2.py; do
  cat > "$cache/$f" <<'EOF'
# Stand-in for get-pip.py (offline): bootstrap pip with ensurepip, then install what was asked.
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
EOF
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
dest="$scratch/ansible_collections/rtgt/target"
mkdir -p "$(dirname "$dest")"
cp -r "$COLLECTION" "$dest"
rm -rf "$dest/tests/output"
find "$dest" -name __pycache__ -prune -exec rm -rf {} +
cd "$dest"
git init -q
git add -A
git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity

ansible-test sanity --python 3.11 --local --requirements --color no "$@"
