#!/usr/bin/env bash
# A Charliecloud image (a folder) for the container tests, made on this machine with nothing pulled from a hub:
# Debian's minimal root with its Python 3.11 (mmdebstrap, from the Debian archive), a venv at /opt/venv holding
# the packages of this machine's venv (torch, MONAI, numpy, ...; hard links, no download) and, copied fresh on
# every call, hpc-runner itself. The root and the packages are reused when the recipe (this file, the venv's
# package list) has not changed; hpc-runner is copied each time, so the image runs the code under test.
#
#   scripts/build-test-image.sh IMAGE_DIR [VENV]      (needs root or user namespaces, mmdebstrap, ch-run)
set -euo pipefail
image=${1:?usage: build-test-image.sh IMAGE_DIR [VENV]}
venv=${2:-.venv}
root=$(cd "$(dirname "$0")/.." && pwd)
site=$(ls -d "$venv"/lib/python3*/site-packages)
export USER=${USER:-$(id -un)}
key=$( { cat "$0"; ls "$site"; } | sha256sum | cut -c1-16)
if [[ $(cat "$image/.recipe" 2>/dev/null) != "$key" ]]; then
  command -v mmdebstrap >/dev/null || apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  command -v ch-run >/dev/null || apt-get install -y -qq --no-install-recommends charliecloud-runtime >/dev/null
  rm -rf "$image" "$image.new"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv bookworm "$image.new"
  ch-run -w "$image.new" -- python3 -m venv --without-pip /opt/venv
  # the venv's Python first on PATH, as images do (a script: a link would not find the venv's pyvenv.cfg)
  printf '#!/bin/sh\nexec /opt/venv/bin/python "$@"\n' > "$image.new/usr/local/bin/python3"
  chmod 755 "$image.new/usr/local/bin/python3"
  dest=$(ls -d "$image.new"/opt/venv/lib/python3*/site-packages)
  cp -al "$site"/. "$dest"/           # hard links: the image's files are this venv's, no copy, no download
  rm -rf "$dest"/__editable__* "$dest"/hpc_bundle_runner* "$dest"/hpc_runner "$dest"/_hpc_runner*
  echo "$key" > "$image.new/.recipe"
  mv "$image.new" "$image"
fi
dest=$(ls -d "$image"/opt/venv/lib/python3*/site-packages)
# replaced only when it differs: a run in the image may be reading it (another test worker)
if ! diff -rq --exclude=__pycache__ "$root/hpc_runner" "$dest/hpc_runner" >/dev/null 2>&1; then
  rm -rf "$dest/hpc_runner.new" && cp -r "$root/hpc_runner" "$dest/hpc_runner.new"
  find "$dest/hpc_runner.new" -name __pycache__ -prune -exec rm -rf {} +
  rm -rf "$dest/hpc_runner" && mv "$dest/hpc_runner.new" "$dest/hpc_runner"
fi
echo "$image"
