"""SLURM's compressed host lists, expanded in Python as scontrol does (scheduler/slurm/hostlist.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.slurm.hostlist import expand_hostlist, first_host, scontrol_hostnames

CASES = {
    "gpu[01-03,07],cpu5": ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"],
    "node7": ["node7"],
    "a-1,b[1-2]": ["a-1", "b1", "b2"],
    "n[8-10]": ["n8", "n9", "n10"],
    "n[08-10]": ["n08", "n09", "n10"],
    "n[001-3]": ["n001", "n002", "n003"],  # padded to the lower bound's width, as scontrol does
    "n[1-010]": ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"],
    "rack[1-2]-n[01-02],x": ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02", "x"],
}


def test_a_compressed_host_list_expands_in_order_with_its_zero_padding():
    for text, hosts in CASES.items():
        assert expand_hostlist(text) == hosts, text


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="no scontrol on this machine")
def test_the_python_expansion_agrees_with_scontrol_show_hostnames(monkeypatch):
    conf = Path("/tmp/hpcr-slurm/etc/slurm.conf")  # the local cluster's (scripts/local-slurm.sh), if it ran
    if "SLURM_CONF" not in os.environ and conf.exists():
        monkeypatch.setenv("SLURM_CONF", str(conf))
    if scontrol_hostnames("a[1-2]") is None:
        pytest.skip("scontrol has no configuration to answer from")
    for text in CASES:
        assert scontrol_hostnames(text) == expand_hostlist(text), text


def test_rank_0_runs_on_the_first_host_of_the_list():
    assert first_host("gpu[03-05,9],cpu1", use_scontrol=False) == "gpu03"
    assert first_host("gpu[01-03,07],cpu5") == "gpu01"


def test_a_list_that_is_not_slurms_syntax_names_the_variable():
    for text in ("gpu[01-03", "gpu01]", "gpu[a-b]", "gpu[3-1]"):
        with pytest.raises(ClusterError, match="SLURM_JOB_NODELIST='"):
            first_host(text, use_scontrol=False)


def test_the_expansion_is_lazy_and_bounded():
    from hpc_runner.scheduler.slurm.hostlist import MAX_HOSTS, hostlist_size, iter_hostlist

    huge = f"n[1-{10 * MAX_HOSTS}]"
    assert hostlist_size(huge) == 10 * MAX_HOSTS and next(iter_hostlist(huge)) == "n1"
    assert first_host(huge, use_scontrol=False) == "n1"  # the first host costs one name
    with pytest.raises(ValueError, match="more than"):
        expand_hostlist(huge)
    with pytest.raises(ValueError):  # a fault at the end is found before the first name
        next(iter_hostlist("gpu[01-02],bad[x]"))
