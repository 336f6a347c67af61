"""Refuse a GPU that the installed torch has no kernels for (torch only warns; the first kernel then fails)."""

from __future__ import annotations

from hpc_runner.engine.cuda_arch import arch_problem, check_cuda_arch, kernels_run_on, release_arches

# torch.cuda.get_arch_list() of the CUDA 12.8 / 12.6 x86_64 wheels, and torch's PYTORCH_RELEASES_CODE_CC
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
RELEASES = {"12.6": {50, 60, 70, 75, 80, 86, 90}, "12.8": {75, 80, 86, 90, 100, 120}}


def test_a_v100_has_no_kernels_in_the_cuda_12_8_wheel_and_the_refusal_says_which_wheel_has():
    assert not kernels_run_on((7, 0), CU128)
    text = arch_problem(0, "Tesla V100-SXM2-32GB", (7, 0), CU128, "2.13.0+cu128", RELEASES)
    assert text.startswith("GPU 0 (Tesla V100-SXM2-32GB, compute capability 7.0) cannot run torch 2.13.0+cu128")
    assert "sm_75 sm_80" in text and "no kernel image is available" in text
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126" in text


def test_gpus_of_a_built_major_version_with_a_newer_minor_run_its_cubins():
    assert kernels_run_on((8, 0), CU128) and kernels_run_on((9, 0), CU128)
    assert kernels_run_on((8, 9), CU128)  # L40: sm_86 cubins run on 8.9
    assert kernels_run_on((7, 0), CU126)
    assert arch_problem(0, "A100", (8, 0), CU128, "2.13.0") is None


def test_integrated_gpus_and_arch_specific_cubins_need_their_own_and_ptx_runs_on_newer_gpus():
    assert not kernels_run_on((8, 7), ["sm_80", "sm_86"])  # Orin: not an sm_80 binary
    assert kernels_run_on((8, 7), ["sm_87"])
    assert not kernels_run_on((9, 1), ["sm_90a"]) and kernels_run_on((9, 0), ["sm_90a"])
    assert kernels_run_on((12, 1), ["compute_120"])  # the driver compiles the PTX
    assert not kernels_run_on((10, 0), ["compute_120"])
    assert kernels_run_on((11, 0), ["sm_101"])  # Thor, renumbered in CUDA 13 (torch's table)


def test_a_cpu_build_or_a_machine_without_gpus_is_not_refused():
    check_cuda_arch()  # this machine: torch without CUDA
    assert arch_problem(0, "any", (7, 0), [], "2.13.0+cpu") is None


def test_torchs_release_table_is_read_in_both_of_its_shapes_and_never_crashes_the_check():
    """torch 2.11 maps CUDA -> set (x86_64 wheels), torch 2.13 CUDA -> {host: set}; the H100 run met the first."""
    flat = {"12.6": {50, 60, 70, 75, 80, 86, 90}, "13.0": {75, 80, 86, 90, 100, 120}}
    by_host = {"12.6": {"x86_64": {50, 60, 70, 75, 80, 86, 90}, "aarch64": {80, 90}},
               "13.0": {"x86_64": {75, 80, 86, 90, 100, 120}, "aarch64": {80, 90, 100, 110, 120}}}
    assert release_arches(flat, "x86_64") == flat
    assert release_arches(by_host, "x86_64") == flat
    assert release_arches(by_host, "aarch64") == {"12.6": {80, 90}, "13.0": {80, 90, 100, 110, 120}}
    assert release_arches(flat, "aarch64") == {}  # the flat table says nothing of Arm wheels
    assert release_arches(None, "x86_64") == {} and release_arches({"13.0": "sm_90"}, "x86_64") == {}
    text = arch_problem(0, "Tesla V100", (7, 0), CU128, "2.11.0+cu130", release_arches(flat, "x86_64"))
    assert "--index-url https://download.pytorch.org/whl/cu126" in text
