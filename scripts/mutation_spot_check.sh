#!/usr/bin/env bash
# Break governor and retry rules on purpose, one at a time, and show the in-process tests fail (issue 30's
# spot-check). Each mutation is undone before the next; the work tree is left as it was.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
TESTS=(tests/sweep tests/scheduler tests/pipeline/test_pipeline_in_memory.py tests/slurm/test_governor.py)
mutate() {  # FILE OLD NEW: replace the one occurrence of OLD, run the tests, restore the file
  local file=$1 backup
  backup=$(mktemp)
  cp "$file" "$backup"
  "$PY" - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
assert text.count(old) == 1, f"{path}: {old!r} is not there once"
open(path, "w").write(text.replace(old, new))
PY
  echo "== $file: '$2' -> '$3'"
  "$PY" -m pytest -q -p no:cacheprovider -x -m "not slow" "${TESTS[@]}" 2>&1 | grep -E "^FAILED|[0-9]+ (passed|failed)" | head -3
  cp "$backup" "$file" && rm -f "$backup"
}
mutate hpc_runner/jobs/governor.py "n = min(same, limits.max_array_size, same if free is None else free)" \
  "n = min(same, limits.max_array_size, same if free is None else free + 1)"       # one task past the free slots
mutate hpc_runner/jobs/governor.py "now = n_tasks if free is None else min(free, n_tasks)" \
  "now = n_tasks if free is None else min(free + 1, n_tasks)"                       # the dry run's plan, likewise
mutate hpc_runner/jobs/retry.py 'if int(point.get("retries", 0)) >= bound:' \
  'if int(point.get("retries", 0)) > bound:'                                          # one retry past the bound
mutate hpc_runner/jobs/retry.py "new = _nice_gb(gb * rule.factor)" "new = _nice_gb(gb)"  # OUT_OF_MEMORY:mem*2 ignored
git diff --quiet -- hpc_runner || { echo "the work tree changed: restore hpc_runner/"; exit 1; }
