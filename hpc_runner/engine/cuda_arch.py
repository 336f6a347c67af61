"""Does this torch build have kernels for this GPU? Refuse before training when it does not.

torch 2.11's CUDA 12.8/13.0 wheels dropped sm_70 (V100); torch only warns when it starts CUDA
(``torch.cuda._check_capability``) and the first kernel then fails with "no kernel image is available
for execution on the device". The rules follow CUDA's compatibility guarantees as torch encodes them
(``torch/cuda/__init__.py``: ``DEVICE_REQUIREMENT``, ``_code_compatible_with_device``): a cubin
``sm_XY`` runs on compute capability X.Z with Z >= Y (same major), except the integrated GPUs
(5.3, 6.2, 7.2, 8.7, 10.1) that need their own; ``sm_XYa`` runs on X.Y only; PTX ``compute_XY`` is
compiled by the driver for any GPU of capability X.Y or newer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hpc_runner.errors import ClusterError

_INTEGRATED = {53, 62, 72, 87, 101}  # Tegra/Jetson: a cubin of their own (torch's DEVICE_REQUIREMENT)
_ALSO_RUNS_ON = {101: {110}}  # Thor was renumbered 10.1 -> 11.0 in CUDA 13: torch maps sm_101 to both


def _code(entry: str) -> tuple[str, int, str]:
    """``sm_90a`` -> ("sm", 90, "a"); ``compute_120`` -> ("compute", 120, "")."""
    kind, _, number = entry.strip().partition("_")
    suffix = number[-1] if number and number[-1] in "af" else ""
    return kind, int(number.rstrip("af")), suffix


def kernels_run_on(capability: tuple[int, int], arch_list: Iterable[str]) -> bool:
    """Return True if some entry of ``arch_list`` (``torch.cuda.get_arch_list()``) runs on a GPU of ``capability``."""
    device = 10 * capability[0] + capability[1]
    for entry in arch_list:
        try:
            kind, code, suffix = _code(entry)
        except ValueError:
            continue
        if kind == "sm":
            if device in _ALSO_RUNS_ON.get(code, ()):
                return True
            if suffix == "a" or device in _INTEGRATED or code in _INTEGRATED:
                if device == code:
                    return True
                continue
            if device // 10 == code // 10 and device >= code:  # "f" (family) as plain: same major, newer minor
                return True
        elif kind == "compute" and (device >= code if not suffix else device == code):
            return True  # PTX: the driver compiles it for this GPU at load time
    return False


def arch_problem(
    index: int,
    name: str,
    capability: tuple[int, int],
    arch_list: Sequence[str],
    torch_version: str,
    releases: Mapping[str, Iterable[int]] | None = None,
) -> str | None:
    """Return one paragraph saying why GPU ``index`` cannot run this torch build, or None when it can.

    ``releases`` maps a CUDA version of torch's wheels to the architectures it is built for (torch's
    ``PYTORCH_RELEASES_CODE_CC`` for this host) and names the wheels that would run on this GPU.
    """
    if not arch_list or kernels_run_on(capability, arch_list):
        return None
    cc = f"{capability[0]}.{capability[1]}"
    text = (f"GPU {index} ({name}, compute capability {cc}) cannot run torch {torch_version}: the build has "
            f"kernels for {' '.join(arch_list)} only, so the first CUDA kernel would fail with \"no kernel image "
            "is available for execution on the device\"")
    fits = [cuda for cuda, codes in (releases or {}).items()
            if kernels_run_on(capability, [f"sm_{c}" for c in codes])]
    base = torch_version.split("+")[0]
    if fits:
        cuda = fits[-1]
        text += (f". Expected a torch built for sm_{capability[0]}{capability[1]}, e.g. the CUDA {cuda} wheel: "
                 f"pip install torch=={base} --index-url https://download.pytorch.org/whl/cu{cuda.replace('.', '')}")
    else:
        text += f". Expected a torch built for sm_{capability[0]}{capability[1]} (an older torch), or newer GPUs"
    return text


def release_arches(table: Any, host: str) -> dict[str, set[int]]:
    """Return ``{CUDA version: architectures}`` of torch's wheels for ``host`` from ``PYTORCH_RELEASES_CODE_CC``.

    The table is torch's own and its shape changed: torch 2.11 maps a CUDA version to a set of
    architectures (x86_64 wheels), torch 2.13 to ``{host: set}``. Read both; anything else gives no
    suggestion rather than a crash (the first real GPU job, on an H100 with torch 2.11, died here).
    """
    if not isinstance(table, Mapping):
        return {}
    out: dict[str, set[int]] = {}
    for cuda, codes in table.items():
        if isinstance(codes, Mapping):
            codes = codes.get(host, ())
        elif host != "x86_64":
            continue  # the flat table is the x86_64 wheels' list
        try:
            out[str(cuda)] = {int(c) for c in codes}
        except (TypeError, ValueError):
            continue
    return out


def check_cuda_arch() -> None:
    """Raise ClusterError when a GPU this process sees has no kernels in the installed torch (no-op without CUDA)."""
    import platform

    import torch

    if not torch.cuda.is_available() or torch.version.cuda is None:  # CPU build, or ROCm: not these rules
        return
    arch_list = torch.cuda.get_arch_list()
    host = "aarch64" if platform.machine().lower() == "aarch64" else "x86_64"
    releases = release_arches(getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", None), host)
    for index in range(torch.cuda.device_count()):
        problem = arch_problem(index, torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index),
                               arch_list, torch.__version__, releases)
        if problem is not None:
            raise ClusterError(problem, hint="check with: python -c 'import torch; print(torch.cuda.get_arch_list())'")
