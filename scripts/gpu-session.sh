#!/usr/bin/env bash
# What a session lent a GPU machine runs, in priority order (each step bounded, logs to $OUT or ./gpu-logs):
# the GPU checks (scripts/gpu_checks.py, with gpu_transforms_match_the_cpu_path: the random transforms after
# prefetch against the CPU path), the example bundle in fp32, AMP and with --gpu_transforms (its val_dice beside
# fp32's), the device-prefetch benchmark in both regimes, the seed notebook's 2D UNet with and without the threaded
# loader, and the CUDA-capable tests with the GPU visible.
# Wheels in .whl/ (monai & co.) are installed first. The whole script ends within GPU_SESSION_S seconds
# (default 500, plus at most 30 s for pytest to write its summary): about 9 minutes on an H100 machine with
# 16 cores.
# The GPU machine has torch but none of these: put them in .whl/ first (pip download --no-deps --only-binary=:all:
# --python-version 3.12 --platform manylinux_2_17_x86_64 -d .whl NAME), and carry .whl:
#   monai==1.6.1 nibabel submitit jsonschema jsonschema-specifications referencing rpds-py fire termcolor
# (fire and termcolor: MONAI's own runner, which the side-by-side inference tests start)
set -u -o pipefail
out=${OUT:-gpu-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
end=$((SECONDS + ${GPU_SESSION_S:-500}))
if compgen -G ".whl/*.whl" >/dev/null; then
  timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
fi
# a .pth, not PYTHONPATH: tests that start a subprocess with an environment of their own still import both
printf '/tmp/site\n%s\n' "$PWD" >"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/hpcr-gpu.pth"
timeout 20 nvidia-smi -L
timeout 60 python3 -c 'import torch, monai; print("torch", torch.__version__, "monai", monai.__version__, torch.cuda.get_device_name())'
# step SECONDS NAME COMMAND...: at most SECONDS, and never past the session's end; a step with under 10 s
# left is skipped. TIMEOUT_OPTS (e.g. "-s INT -k 30") choose how it is stopped.
step() {
  local t=$1 name=$2; shift 2
  local left=$((end - SECONDS))
  ((t > left)) && t=$left
  if ((t < 10)); then echo "== $name: skipped, ${left} s left of the session"; return; fi
  echo "== $name (at most $t s)"
  local t0=$SECONDS
  # shellcheck disable=SC2086  # TIMEOUT_OPTS is a list of options
  timeout ${TIMEOUT_OPTS:-} "$t" "$@" 2>&1 | tee "$out/$name.log" | tail -n "${TAIL:-25}"
  echo "== $name: rc ${PIPESTATUS[0]} in $((SECONDS - t0)) s"
}
step 100 gpu_checks python3 scripts/gpu_checks.py
step 50 example_fp32 python3 -m hpc_runner run training --bundle bundles/synthetic_seg --output_dir /tmp/r_fp32
step 50 example_amp python3 -m hpc_runner run training --bundle bundles/synthetic_seg --output_dir /tmp/r_amp --trainer#amp true
step 40 example_gpu_transforms python3 -m hpc_runner run training --bundle bundles/synthetic_seg \
  --output_dir /tmp/r_gput --gpu_transforms
step 90 bench_device_prefetch python3 bench/device_prefetch.py
# the seed notebook's 2D UNet, sequential vs ThreadDataLoader on CUDA: its epoch-time ratio beside the notebook's 0.61
step 60 bench_notebook python3 bench/notebook_workload.py --batches 8 --rounds 3
# SIGINT, as Ctrl-C: pytest (and xdist) stop and still write the short summary (-rfE: failures and errors by
# name); -v logs each result as it comes, so the names survive even a KILL 30 s later
TIMEOUT_OPTS="-s INT -k 30" TAIL=60 step 200 pytest python3 -m pytest tests/engine tests/data tests/inference \
  -m "not slurm" -n 14 -v -rfE -p no:cacheprovider
grep -E "^(FAILED|ERROR) |(FAILED|ERROR) tests/" "$out/pytest.log" 2>/dev/null | sort -u | head -n 40
echo "== gpu-session: $SECONDS s in all"
