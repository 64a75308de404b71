#!/usr/bin/env bash
# Mutation run of the exporter's collector (exporter/collector.py) and the snapshot builder
# (fairness_core/snapshot.py) with mutmut, against the tests that cover them; docs/testing.md
# ("Mutation run of the collector") has the last score and what the survivors are.
#
#   bash scripts/mutate-collector.sh     # some 12 to 15 minutes on 2 cores: one test process
#
# Nothing in the repository changes. mutmut goes into a venv of its own (MUTMUT_VENV, default
# /tmp/fairctl-mutmut-venv) that also sees the project's .venv packages, and runs in a copy of the
# work tree (MUTMUT_WORK, default a new directory under /tmp). Afterwards, in that copy:
#   "$MUTMUT_VENV/bin/mutmut" results          # the surviving mutants
#   "$MUTMUT_VENV/bin/mutmut" show NAME        # one mutant's diff
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
project_python=$root/.venv/bin/python
venv=${MUTMUT_VENV:-/tmp/fairctl-mutmut-venv}
work=${MUTMUT_WORK:-$(mktemp -d /tmp/fairctl-mutmut.XXXXXX)}
tests=(tests/test_snapshot.py tests/test_exporter_collector.py tests/test_unconfigured_exporter.py
       tests/test_collector_arithmetic.py)

[ -x "$project_python" ] || { echo "no $project_python: run bash scripts/setup.sh first" >&2; exit 1; }
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
if [ ! -x "$venv/bin/mutmut" ]; then
  "$("$project_python" -c 'import sys; print(sys._base_executable)')" -m venv "$venv"
  # pytest as pyproject.toml pins it: mutmut runs the tests in its own interpreter.
  "$venv/bin/pip" install -q "mutmut==3.8.1" "pytest>=8,<9.2"
fi
# The project's packages, its editable install included, after the mutmut venv's own.
pth=$(purelib "$venv/bin/python")/fairctl-project.pth
echo "import site; site.addsitedir('$(purelib "$project_python")')" > "$pth"

# The work tree as it is (tracked and new files, not ignored ones).
mkdir -p "$work"
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
   | tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$work"
# mutmut mutates only the two modules; the rest of both packages is copied beside them, and
# fairness.yaml is the example config the tests start from. -n 0: the tests in mutmut's process.
{
  echo "[mutmut]"
  printf 'source_paths =\n    exporter\n    fairness_core\n'
  printf 'only_mutate =\n    exporter/collector.py\n    fairness_core/snapshot.py\n'
  printf 'also_copy =\n    fairness.yaml\n'
  printf 'pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -n\n    0\n'
  printf 'pytest_add_cli_args_test_selection =\n'
  printf '    %s\n' "${tests[@]}"
} > "$work/setup.cfg"

cd "$work"
echo "mutmut 3.8.1 in $work (log: $work/mutmut-run.log)"
"$venv/bin/mutmut" run --max-children 1 > mutmut-run.log 2>&1 || { tail -n 40 mutmut-run.log >&2; exit 1; }
"$venv/bin/mutmut" results --all true > mutmut-results.txt
echo "mutants by outcome (no tests: none of the tests runs the function):"
sed 's/^[^:]*: //' mutmut-results.txt | sort | uniq -c
echo "survivors by function: grep -v killed $work/mutmut-results.txt"
