#!/usr/bin/env bash
# What a session lent a GPU machine runs, in priority order (each step bounded, logs to $OUT or ./gpu-logs):
# the GPU checks (scripts/gpu_checks.py), the CUDA-capable tests with the GPU visible, the example bundle
# in fp32 and AMP, and the device-prefetch benchmark. Wheels in .whl/ (monai & co.) are installed first.
set -u -o pipefail
out=${OUT:-gpu-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
# a .pth, not PYTHONPATH: tests that start a subprocess with an environment of their own still import both
printf '/tmp/site\n%s\n' "$PWD" >"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/hpcr-gpu.pth"
nvidia-smi -L
python3 -c 'import torch, monai; print("torch", torch.__version__, "monai", monai.__version__, torch.cuda.get_device_name())'
step() { local t=$1 name=$2; shift 2; echo "== $name"; local t0=$SECONDS; timeout "$t" "$@" 2>&1 | tee "$out/$name.log" | tail -n 25; echo "== $name: rc ${PIPESTATUS[0]} in $((SECONDS - t0)) s"; }
step 120 gpu_checks python3 scripts/gpu_checks.py
step 60 example_fp32 python3 -m hpc_runner run training --bundle bundles/synthetic_seg --output_dir /tmp/r_fp32
step 60 example_amp python3 -m hpc_runner run training --bundle bundles/synthetic_seg --output_dir /tmp/r_amp --trainer#amp true
step 90 bench_device_prefetch python3 bench/device_prefetch.py
step 220 pytest python3 -m pytest tests/engine tests/data tests/inference -m "not slurm" -n 14 -q -p no:cacheprovider
