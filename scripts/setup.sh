#!/usr/bin/env bash
# One-time set-up on a fresh Debian/Ubuntu machine: the servers fairctl talks to, a headless
# browser for the report test, Sidekiq and Node.js for the exporter's watch tests (from Debian's
# packages, only when missing), then fairctl itself with its test extras in a virtualenv at .venv.
# Safe to run again.
#
# Python packages never go into the system's Python: Debian and Ubuntu mark it externally managed
# (PEP 668) and refuse `pip install` there. Inside a virtualenv of your own (VIRTUAL_ENV set),
# fairctl is installed into that one and .venv links to it; otherwise .venv is created with the
# first python3 on PATH (3.11 or newer). Either way the commands are .venv/bin/fairctl and
# .venv/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."

python=python3
if ! command -v "$python" >/dev/null 2>&1; then
  echo "setup: no python3 on PATH; install it with: apt-get install -y python3" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: fairctl needs Python 3.11 or newer; $("$python" --version 2>&1) is first on PATH" >&2
  exit 1
fi

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the test that renders fairctl simulate --report
command -v sidekiq >/dev/null 2>&1 || need+=(ruby-sidekiq)  # the exporter's watch tests run a real Sidekiq
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)  # ... and a real BullMQ worker
# Debian's Python has no ensurepip (so no `python3 -m venv`) until python3-venv is installed.
if [ -z "${VIRTUAL_ENV:-}" ] && [ ! -x .venv/bin/python ] && ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${need[*]} from Debian's packages" >&2
  # On a freshly booted machine another apt-get or dpkg (unattended-upgrades, cloud-init) often
  # holds the package locks for a few minutes: wait for them instead of failing at once. apt-get
  # install waits by itself with DPkg::Lock::Timeout; older apt-get update does not, so we also
  # wait here, while fuser (psmisc) sees a process holding one of the locks.
  lock_wait=600
  apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$lock_wait")
  wait_for_apt_locks() {
    command -v fuser >/dev/null 2>&1 || return 0
    local waited=0
    while $sudo fuser -s /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock \
        /var/cache/apt/archives/lock 2>/dev/null; do
      if [ "$waited" -eq 0 ]; then
        echo "setup: waiting for another apt-get/dpkg to finish (up to $((lock_wait / 60)) minutes)..." >&2
      elif [ "$waited" -ge "$lock_wait" ]; then
        echo "setup: another apt-get/dpkg still holds the package locks after $((lock_wait / 60)) minutes; run this again when it is done" >&2
        exit 1
      fi
      sleep 5
      waited=$((waited + 5))
    done
  }
  wait_for_apt_locks
  "${apt[@]}" update -q
  wait_for_apt_locks
  "${apt[@]}" install -y -q --no-install-recommends "${need[@]}"
fi

if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv="$VIRTUAL_ENV"
  if [ ! -e .venv ] || [ -L .venv ]; then
    ln -sfn "$venv" .venv
  elif [ "$(cd .venv && pwd -P)" != "$(cd "$venv" && pwd -P)" ]; then
    echo "setup: installing into your virtualenv $venv; .venv is another one, so run $venv/bin/fairctl" >&2
  fi
else
  venv=.venv
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating the virtualenv .venv with $("$python" --version 2>&1)" >&2
    "$python" -m venv .venv
  fi
fi

"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
echo "setup: done; run $venv/bin/fairctl (or activate it: . $venv/bin/activate)" >&2
