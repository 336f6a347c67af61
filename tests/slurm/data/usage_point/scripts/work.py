"""What a usage_point does on request: burn CPU, sleep, hold memory, or train slowly (tests of right-sizing)."""

import time
from pathlib import Path

import torch


def act(mode, seconds=0.0, alloc_mb=0, hold_s=0.0, fail_once="", output_dir="."):
    """Burn one CPU or sleep for ``seconds``; hold ``alloc_mb`` MB (every page touched) for ``hold_s`` s;
    ``fail_once="MemoryError"``: raise it on the first attempt only (a marker in the run dir remembers)."""
    marker = Path(output_dir) / "failed-once"
    if fail_once not in ("", "none") and not marker.exists():
        marker.touch()
        raise {"MemoryError": MemoryError, "ValueError": ValueError}[fail_once](f"usage_point: {fail_once} once")
    if alloc_mb:
        block = bytearray(int(alloc_mb) * 1024 * 1024)
        for i in range(0, len(block), 4096):  # touch every page: resident, not just reserved
            block[i] = 1
        print(f"usage_point: holding {alloc_mb} MB", flush=True)
        time.sleep(hold_s)
        del block
    end = time.monotonic() + float(seconds)
    if mode == "burn":
        n = 0
        while time.monotonic() < end:
            n += 1
    elif mode == "sleep":
        time.sleep(max(0.0, end - time.monotonic()))
    print(f"usage_point: {mode} done", flush=True)
    return mode


class SlowDataset(torch.utils.data.Dataset):
    """Squares on noise that take ``item_s`` seconds each to load (sleeping): epochs long enough to time."""

    def __init__(self, n, size, seed, item_s=0.0):
        g = torch.Generator().manual_seed(seed)
        self.item_s = float(item_s)
        self.items = []
        for _ in range(n):
            label = torch.zeros(1, size, size, dtype=torch.long)
            x, y = torch.randint(0, size // 2, (2,), generator=g).tolist()
            label[0, x : x + size // 2, y : y + size // 2] = 1
            self.items.append({"image": label.float() + 0.5 * torch.randn(1, size, size, generator=g), "label": label})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        time.sleep(self.item_s)
        return self.items[i]
