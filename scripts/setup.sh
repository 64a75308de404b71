#!/usr/bin/env bash
# One-time set-up on a fresh Debian/Ubuntu machine: the servers fairctl talks to and a headless
# browser for the report test (from Debian's packages, only when missing), and fairctl itself with
# its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the test that renders fairctl simulate --report

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${need[*]} from Debian's packages" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
