"""The Trainer under two real gloo processes: DDP options from the bundle, sharding a network the bundle
wrapped itself, each rank's own random states after a resume, and rank 0 choosing the checkpoint.

One pair of processes runs every scenario (torch's import is most of the time); each scenario reports
its result or its error, so one test fails without taking the others with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ITEMS, BATCH = 8, 1  # 8 items, batch 1 per rank: 4 steps an epoch on 2 ranks, 8 on one

RANK_SCRIPT = textwrap.dedent('''
    import json, os, shutil, sys, traceback
    from datetime import timedelta
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch import nn

    from hpc_runner.engine.trainer import Trainer

    rank = int(os.environ["RANK"])
    tmp = Path(sys.argv[2])
    # a short timeout: a scenario whose ranks disagree fails in a minute instead of hanging the test
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))

    class Dropped(nn.Module):
        """A tiny conv net with dropout: its masks come from each rank's own torch RNG."""
        def __init__(self):
            super().__init__()
            self.conv, self.out, self.drop = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 1, 1), nn.Dropout(0.5)
        def forward(self, x):
            return self.out(self.drop(torch.relu(self.conv(x))))

    class TwoHeads(Dropped):
        """A second output branch that no loss uses, like BasicUNetPlusPlus(deep_supervision=False)."""
        def __init__(self):
            super().__init__()
            self.aux = nn.Conv2d(4, 1, 1)

    g = torch.Generator().manual_seed(0)
    items = [{"image": torch.randn(1, 8, 8, generator=g), "label": torch.randn(1, 8, 8, generator=g)}
             for _ in range(%(items)d)]

    def trainer(net, out=None, **kw):
        loader = torch.utils.data.DataLoader(items, batch_size=%(batch)d, shuffle=False)
        return Trainer(net, torch.optim.Adam(net.parameters(), lr=1e-2), nn.MSELoss(), loader, progress=False,
                       output_dir=out, **kw)

    def weights(run):
        return torch.load(run / "model.pt", weights_only=True)

    def same(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    def ddp_option():
        summary = trainer(TwoHeads(), ddp={"find_unused_parameters": True}, max_epochs=2).run()
        return {"steps": summary["steps"]}

    def prewrapped():
        net = nn.parallel.DistributedDataParallel(Dropped())
        return {"steps": trainer(net, max_epochs=1).run()["steps"]}

    def full_run():
        torch.manual_seed(100 + rank)  # no bundle seed: each rank's dropout draws differ
        trainer(Dropped(), tmp / "full", max_epochs=1, checkpoint_interval=1, keep_checkpoints=10).run()
        dist.barrier()

    def resume_from(dirs):
        if rank == 0:
            for d, steps in dict(dirs).items():
                (d / "checkpoints").mkdir(parents=True)
                for s in steps:
                    shutil.copy(tmp / "full" / "checkpoints" / f"ckpt_{s:08d}.pt", d / "checkpoints")
        dist.barrier()
        torch.manual_seed(999)  # a state the checkpoint must replace
        out = dirs[rank][0]
        summary = trainer(Dropped(), out, max_epochs=1, checkpoint_interval=1, keep_checkpoints=10).run()
        result = {"resumed_from": Path(summary["resumed_from"]).name, "steps": summary["steps"]}
        dist.barrier()
        if rank == 0:
            result["bit_identical"] = same(weights(tmp / "full"), weights(out))
        return result

    def own_rng():
        full_run()
        return resume_from([(tmp / "resumed", [2])] * 2)

    def rank0_chooses():
        # rank 1's view of the folder has a newer file than rank 0's (a shared filesystem's caches)
        return resume_from([(tmp / "rank0_view", [2]), (tmp / "rank1_view", [2, 3])])

    def unused_fails():
        try:
            trainer(TwoHeads(), max_epochs=1).run()
        except Exception as exc:
            return {"error": str(exc).splitlines()[0][:300]}
        return {"error": None}

    results = {}
    for name in sys.argv[3].split(","):
        try:
            results[name] = globals()[name]()
        except Exception as exc:
            traceback.print_exc()
            results[name] = {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    print("RESULTS " + json.dumps(results), flush=True)
    dist.destroy_process_group()
''') % {"items": ITEMS, "batch": BATCH}

SCENARIOS = ["prewrapped", "ddp_option", "own_rng", "rank0_chooses", "unused_fails"]


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory) -> list[dict]:
    """Each rank's results of every scenario (two processes, gloo, CPU)."""
    tmp = tmp_path_factory.mktemp("trainer_ddp")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCR"))}
    env.update(OMP_NUM_THREADS="1", WORLD_SIZE="2", PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(tmp / "store"), str(tmp), ",".join(SCENARIOS)],
                              env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=420)
            lines = [line for line in out.splitlines() if line.startswith("RESULTS ")]
            assert lines, f"exit {p.returncode}:\n{out[-2000:]}\n{err[-4000:]}"
            results.append(json.loads(lines[-1][len("RESULTS "):]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


@pytest.mark.slow
def test_a_network_with_an_unused_branch_needs_find_unused_parameters_under_ddp(gloo_results):
    for rank in gloo_results:
        assert "Expected to have finished reduction" in (rank["unused_fails"].get("error") or ""), rank


@pytest.mark.slow
def test_the_bundle_sets_ddp_options_and_an_unused_branch_then_trains(gloo_results):
    for rank in gloo_results:
        assert rank["ddp_option"] == {"steps": 2 * ITEMS // (2 * BATCH)}, rank


@pytest.mark.slow
def test_a_network_the_bundle_wrapped_in_ddp_still_trains_on_each_ranks_share_only(gloo_results):
    for rank in gloo_results:
        assert rank["prewrapped"] == {"steps": ITEMS // (2 * BATCH)}, rank  # not ITEMS: every rank on all data


@pytest.mark.slow
def test_each_rank_resumes_with_its_own_random_states_and_ends_bit_identical(gloo_results):
    for rank in gloo_results:
        assert rank["own_rng"].get("resumed_from") == "ckpt_00000002.pt", rank
    assert gloo_results[0]["own_rng"]["bit_identical"] is True


@pytest.mark.slow
def test_rank_0_chooses_the_checkpoint_when_the_ranks_see_different_newest_files(gloo_results):
    assert [r["rank0_chooses"].get("resumed_from") for r in gloo_results] == ["ckpt_00000002.pt"] * 2, gloo_results
    assert gloo_results[0]["rank0_chooses"]["bit_identical"] is True
