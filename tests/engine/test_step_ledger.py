"""StepLedger: per-step loss and times are read once the device has finished the step, never by waiting
for the step just queued; the time before a step starts (loader, host-to-device copy) counts as data."""

from __future__ import annotations

import threading
import time

import torch

from hpc_runner.engine.trainer import StepLedger


class DeviceEvent:
    """An event a separate thread completes, as a GPU completes a CUDA event some time after it is queued.

    The real thread is the stand-in for the GPU: the ledger under test is real; ``waited`` counts the
    times the ledger made the host wait for an event that had not completed yet.
    """

    waited = 0

    def __init__(self) -> None:
        self.done = threading.Event()
        self.t = 0.0

    def record(self) -> None:
        pass

    def complete(self) -> None:
        self.t = time.perf_counter()
        self.done.set()

    def query(self) -> bool:
        return self.done.is_set()

    def synchronize(self) -> None:
        if not self.done.is_set():
            DeviceEvent.waited += 1
            assert self.done.wait(10)

    def elapsed_time(self, end: DeviceEvent) -> float:
        return (end.t - self.t) * 1000.0


def test_on_cpu_each_step_is_read_at_once_with_its_loss_and_times():
    ledger = StepLedger(torch.device("cpu"), lag=2)
    out = []
    for i in range(3):
        asked = ledger.mark()
        time.sleep(0.03)  # the loader, and any copy to the device: before the step starts
        start = ledger.mark()
        time.sleep(0.01)  # the step
        ledger.step_ended({"step": i + 1}, torch.tensor(float(i)), asked, start)
        out += ledger.ready()
        assert len(ledger) == 0, "the CPU clock is synchronous: nothing to wait for"
    assert [r["loss"] for r in out] == [0.0, 1.0, 2.0]
    assert all(0.025 < r["data_s"] < 0.2 and 0.008 < r["compute_s"] < 0.1 for r in out), out


def test_a_step_still_on_the_device_is_not_waited_for_until_more_than_lag_steps_are_behind_it():
    events: list[DeviceEvent] = []

    def new_event() -> DeviceEvent:
        events.append(DeviceEvent())
        return events[-1]

    # events: [step 1 asked, start, end, step 2 asked, ...]; the "GPU" finishes step 1 in 50 ms
    finisher = threading.Timer(0.05, lambda: [e.complete() for e in events[0:3]])
    DeviceEvent.waited = 0
    ledger = StepLedger(torch.device("cpu"), lag=2, new_event=new_event)
    for i in range(2):
        asked, start = ledger.mark(), ledger.mark()
        ledger.step_ended({"step": i + 1}, torch.tensor(float(i)), asked, start)
        assert ledger.ready() == [], "a step queued moments ago is not read: the host does not wait for it"
    assert DeviceEvent.waited == 0 and len(ledger) == 2
    finisher.start()  # the third step pushes the first beyond the lag: reading it waits for that step only
    asked, start = ledger.mark(), ledger.mark()
    ledger.step_ended({"step": 3}, torch.tensor(2.0), asked, start)
    first = ledger.ready()
    assert [r["step"] for r in first] == [1] and DeviceEvent.waited == 1  # step 1 only; steps 2-3 stay queued
    for e in events:
        e.complete()
    rest = ledger.ready()
    assert [r["step"] for r in rest] == [2, 3] and DeviceEvent.waited == 1, "finished steps are read without waiting"
    finisher.join()


def test_flush_reads_every_step_in_order_before_a_checkpoint():
    events: list[DeviceEvent] = []

    def new_event() -> DeviceEvent:
        events.append(DeviceEvent())
        return events[-1]

    ledger = StepLedger(torch.device("cpu"), lag=8, new_event=new_event)
    for i in range(4):
        asked, start = ledger.mark(), ledger.mark()
        ledger.step_ended({"step": i + 1}, torch.tensor(float(i)), asked, start)
    threading.Timer(0.02, lambda: [e.complete() for e in events]).start()
    assert [r["step"] for r in ledger.ready(flush=True)] == [1, 2, 3, 4] and len(ledger) == 0
