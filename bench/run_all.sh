#!/usr/bin/env bash
# Run every data-path benchmark in turn; extra arguments (e.g. --quick) go to each one.
# Usage: bench/run_all.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for b in overlap notebook_workload preprocess_throughput device_prefetch result_writing exit_time; do
    echo "== bench/$b.py $*"
    "$PY" "bench/$b.py" "$@"
done
