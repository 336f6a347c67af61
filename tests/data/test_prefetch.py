"""DevicePrefetcher: CPU passthrough keeps objects and MetaTensor meta; when it pins; the CUDA path on a GPU."""

from __future__ import annotations

import threading
from collections import namedtuple

import pytest
import torch
from monai.data import MetaTensor

from hpc_runner.data import DevicePrefetcher, ThreadDataLoader, map_tensors, move_to_device, prefetch_to_device
from hpc_runner.data.pin_choice import PinChoice, compute_bound
from hpc_runner.data.prefetch import _DeviceCopyIterator, _IdleClock

Pair = namedtuple("Pair", "a b")


def batch(i: int) -> dict:
    img = MetaTensor(torch.full((2, 1, 4, 4), float(i)), meta={"filename_or_obj": f"img{i}.nii"})
    img.is_batch = True
    nested = [Pair(torch.ones(1), "x"), {"k": (torch.ones(2),)}]
    return {"image": img, "label": torch.zeros(2, 1, 4, 4), "nested": nested}


def test_cpu_is_a_passthrough_without_threads():
    batches = [batch(i) for i in range(3)]
    before = threading.active_count()
    pf = DevicePrefetcher(batches, "cpu")
    it = iter(pf)
    assert threading.active_count() == before
    out = list(it)
    assert all(o is b for o, b in zip(out, batches))  # the very same objects
    assert out[1]["image"].meta["filename_or_obj"] == "img1.nii"
    assert len(pf) == 3


def test_cpu_prefetcher_forwards_loader_api():
    loader = ThreadDataLoader([{"image": torch.ones(1)} for _ in range(4)], batch_size=2, seed=0)
    pf = DevicePrefetcher(loader, torch.device("cpu"))
    pf.set_epoch(3)
    assert loader.epoch == 3 and pf.batch_size == 2 and pf.dataset is loader.dataset and len(pf) == 2
    assert len(list(pf)) == 2


def test_map_tensors_keeps_structure_and_meta():
    b = batch(1)
    out = map_tensors(lambda t: t * 2, b)
    assert isinstance(out["image"], MetaTensor)
    assert out["image"].meta["filename_or_obj"] == "img1.nii" and out["image"].is_batch
    assert torch.equal(out["image"].as_tensor(), torch.full((2, 1, 4, 4), 2.0))
    assert isinstance(out["nested"][0], Pair) and out["nested"][0].b == "x"
    assert torch.equal(out["nested"][1]["k"][0], torch.full((2,), 2.0))
    moved = move_to_device(b, "cpu")
    assert moved["image"].meta == b["image"].meta


@pytest.mark.cuda
def test_cuda_prefetch_moves_batches_and_keeps_meta():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    batches = [batch(i) for i in range(5)]
    out = []
    for b in prefetch_to_device(batches, "cuda"):
        assert b["image"].device.type == "cuda" and b["label"].device.type == "cuda"
        assert b["nested"][1]["k"][0].device.type == "cuda"
        assert isinstance(b["image"], MetaTensor) and b["image"].is_batch
        out.append((b["image"].meta["filename_or_obj"], b["image"].sum().item()))
    assert out == [(f"img{i}.nii", 32.0 * i) for i in range(5)]


@pytest.mark.cuda
def test_cuda_prefetch_from_thread_loader_with_pinning():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    data = [{"image": torch.full((1, 64, 64), float(i)), "label": torch.zeros(1, 64, 64)} for i in range(12)]
    loader = ThreadDataLoader(data, batch_size=4, seed=0, num_workers=2, use_thread_workers=True)
    sums = []
    for b in DevicePrefetcher(loader, "cuda:0", pin_memory=True):  # pinned on the producer thread
        y = (b["image"] * 2).sum()  # a step on the compute stream reading the prefetched batch
        sums.append(y.item())
    assert sums == [2 * 64 * 64 * sum(range(k, k + 4)) for k in (0, 4, 8)]


@pytest.mark.cuda
def test_cuda_prefetch_error_after_last_good_batch():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")

    def src():
        yield {"x": torch.ones(2)}
        raise KeyError("broken")

    it = prefetch_to_device(src(), "cuda")
    assert next(it)["x"].device.type == "cuda"  # the good batch is not lost to the prefetch
    with pytest.raises(KeyError):
        next(it)


def test_moving_a_batch_shares_its_metatensor_meta_instead_of_copying_it():
    b = batch(2)
    moved = map_tensors(lambda t: t.clone(), b)  # a new tensor, as a copy to another device makes
    assert moved["image"] is not b["image"] and isinstance(moved["image"], MetaTensor)
    assert moved["image"].meta is b["image"].meta, "the meta dict is shared, not copied per batch"
    again = move_to_device(moved, "cpu")  # the trainer's pass over a batch already on its device
    assert again["image"] is moved["image"], "a tensor already there is handed back as it is"


def test_a_repeated_batch_is_copied_to_the_device_once():
    loader = ThreadDataLoader([{"image": torch.full((3,), float(i))} for i in range(4)], batch_size=2, seed=0,
                              repeats=3)
    out = list(DevicePrefetcher(loader, "meta"))  # the meta device: a real copy target without a GPU
    assert len(out) == 6 and all(b["image"].device.type == "meta" for b in out)
    assert out[0] is out[1] is out[2] and out[3] is out[4] is out[5], "one device copy per loaded batch"
    assert out[2] is not out[3]


def test_batch_n_is_handed_back_before_the_loader_has_made_batch_n_plus_1():
    made_second = threading.Event()
    release = threading.Event()

    def slow_loader():
        yield {"x": torch.ones(2)}
        release.wait(10)  # the loader is still working on batch 1
        made_second.set()
        yield {"x": torch.zeros(2)}

    it = iter(DevicePrefetcher(slow_loader(), "meta"))
    first = next(it)
    assert first["x"].device.type == "meta" and not made_second.is_set(), "batch 0 did not wait for batch 1"
    release.set()
    assert next(it)["x"].shape == (2,) and made_second.is_set()
    with pytest.raises(StopIteration):
        next(it)


def test_a_loader_error_comes_after_the_last_good_batch():
    def broken():
        yield {"x": torch.ones(2)}
        raise KeyError("broken")

    it = iter(DevicePrefetcher(broken(), "meta"))
    assert next(it)["x"].device.type == "meta"  # the good batch is not lost
    with pytest.raises(KeyError):
        next(it)


# -- when to pin (hpc_runner.data.pin_choice): made-up idle and busy seconds of the compute stream --------


def choice_after(batches: list[tuple[float, float]], **kw) -> PinChoice:
    choice = PinChoice(**kw)
    for idle, busy in batches:
        choice.observe(idle, busy)
    return choice


def test_a_loop_that_waits_for_data_is_never_pinned():
    # the H100 figure of issue 36: 72 ms per batch of which the step computes ~20
    choice = choice_after([(0.052, 0.020)] * 10)
    assert choice.decided is False and not choice.pin
    assert "not pinned" in choice.line()


def test_a_compute_bound_loop_is_pinned_once_the_window_is_full():
    choice = PinChoice(warmup=1, window=4)
    for _ in range(4):
        choice.observe(0.001, 0.135)
        assert not choice.pin, "no pinning before warmup + window batches were seen"
    choice.observe(0.001, 0.135)
    assert choice.decided is True and choice.pin and "compute-bound: pinned" in choice.line()


def test_the_first_batch_fills_the_pipeline_and_does_not_count():
    assert choice_after([(5.0, 0.0)] + [(0.0, 0.1)] * 4).pin  # a slow loader start is not a data-bound loop


def test_the_choice_is_made_once_and_kept_for_the_epoch():
    choice = choice_after([(0.0, 0.1)] * 5)
    for _ in range(20):
        choice.observe(1.0, 0.0)  # after pinning, waits come from the pinning itself: not a reason to flip
    assert choice.pin and choice.seen == 5


def test_a_gpu_several_batches_behind_the_loop_is_compute_bound_before_any_time_arrives():
    choice = PinChoice()
    choice.queued(2)  # the batch just handed over and one more: a GPU that keeps up looks like this
    assert choice.decided is None
    choice.queued(3)
    assert choice.pin and "3 batches behind" in choice.line()
    waits = choice_after([(0.052, 0.020)] * 5)
    waits.queued(5)
    assert waits.decided is False, "a decision is not revisited"


def test_an_epoch_too_short_to_measure_is_not_pinned():
    choice = choice_after([(0.0, 0.1)] * 3)
    assert choice.decided is None and not choice.pin and "undecided" in choice.line()


def test_a_loop_waiting_just_under_the_threshold_is_compute_bound():
    assert compute_bound(0.049, 0.951) and not compute_bound(0.05, 0.95)
    assert not compute_bound(0.0, 0.0), "no time measured: do not pin"


def test_pin_memory_takes_true_false_or_auto():
    assert DevicePrefetcher([], "cpu").pin_memory == "auto"
    with pytest.raises(ValueError, match="pin_memory"):
        DevicePrefetcher([], "cpu", pin_memory="always")


def test_the_clock_is_told_before_the_loop_waits_for_the_next_batch():
    events: list[str] = []

    def source():
        for i in range(2):
            events.append(f"made {i}")
            yield {"x": torch.full((1,), float(i))}

    it = _DeviceCopyIterator(source(), lambda b: events.append("copy") or b, lambda b: events.append("handover") or b,
                             lambda: events.append("asked"))
    assert len(list(it)) == 2
    assert events == ["asked", "made 0", "copy", "handover", "asked", "made 1", "copy", "handover", "asked"]


@pytest.mark.cuda
def test_cuda_auto_pins_a_compute_bound_loop_and_not_one_that_waits_for_data():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import time

    a = torch.randn(4096, 4096, device="cuda") / 64  # ~45 ms of matrix products per batch on an H200

    def slow_loader(n: int, sleep_s: float):
        for i in range(n):
            time.sleep(sleep_s)
            yield {"x": torch.full((256, 1024), float(i))}

    heavy = DevicePrefetcher(slow_loader(12, 0.0), "cuda")
    firsts = []
    for b in heavy:
        for _ in range(20):
            a = torch.tanh(a @ a)  # ms of GPU work per batch, queued faster than it runs (no sync in the loop)
        firsts.append(b["x"][0, 0])
    assert [x.item() for x in firsts] == [float(i) for i in range(12)]
    assert heavy.pin_choice is not None and heavy.pin_choice.pin, heavy.pin_choice.line()
    waiting = DevicePrefetcher(slow_loader(12, 0.02), "cuda")
    assert [b["x"][0, 0].item() for b in waiting] == [float(i) for i in range(12)]
    assert waiting.pin_choice is not None and waiting.pin_choice.decided is False, waiting.pin_choice.line()


class FakeEvent:
    """A CUDA event on a made-up GPU clock: `now` is when the GPU reaches it, `done` whether it has."""

    now = 0.0
    done = True

    def record(self, stream=None) -> None:
        self.at, self.reached = FakeEvent.now, FakeEvent.done

    def query(self) -> bool:
        return self.reached

    def elapsed_time(self, later: FakeEvent) -> float:
        return (later.at - self.at) * 1e3  # milliseconds, as CUDA's


@pytest.mark.parametrize(("idle", "busy", "pinned"), [(0.050, 0.020, False), (0.0005, 0.135, True)])
def test_the_clock_measures_idle_and_busy_on_the_gpus_events(monkeypatch, idle, busy, pinned):
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(FakeEvent, "now", 0.0)
    clock = _IdleClock(torch.device("cuda", 0), PinChoice())
    for _ in range(6):
        clock.asked()
        FakeEvent.now += idle  # the compute stream waits for the batch
        clock.ready()
        FakeEvent.now += busy  # and computes on it
    assert clock.choice.decided is pinned and clock.choice.seen == 5
    assert clock.choice.idle_s == pytest.approx(4 * idle) and clock.choice.busy_s == pytest.approx(4 * busy)


def test_the_clock_reads_a_backlog_when_the_gpu_has_not_reached_the_events(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(FakeEvent, "done", False)  # the host runs ahead: nothing completes
    clock = _IdleClock(torch.device("cuda", 0), PinChoice())
    for k in range(4):
        clock.asked()
        clock.ready()
        assert clock.choice.pin == (k == 3), k  # batches 1..3 open behind the loop
    assert clock.choice.seen == 0 and clock._open
    clock.asked()
    clock.ready()
    assert len(clock._open) == 3, "decided: no more events recorded"
