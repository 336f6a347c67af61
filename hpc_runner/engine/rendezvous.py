"""How the ranks of a run find each other: rank 0's address and port, the wait for every rank, gloo's interface.

Under srun without torchrun the torch.distributed variables come from SLURM (:func:`rendezvous_plan`).
The wait for the other ranks (:func:`connect_store`) is bounded by ``HPCR_RENDEZVOUS_TIMEOUT`` seconds
and polls in Python, so SIGINT/SIGTERM end it at once: an environment that claims several processes
with no peer (``SLURM_NTASKS=2`` in a shell, ``RANK``/``WORLD_SIZE`` left set) is one paragraph and
exit code 2 (130 on Ctrl-C), not a process that waits for torch's 30 minutes and ignores Ctrl-C. SLURM's
variables without a step behind them (no slurmstepd among this process's parents: left in a shell) get
``STALE_WAIT_S`` seconds, not the full timeout (:func:`rendezvous_wait`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from hpc_runner.engine.launch_env import env_int, launched_world, local_rank, node_rank, srun_without_torchrun
from hpc_runner.errors import ClusterError, ConfigError
from hpc_runner.scheduler.job_env import (
    first_node,
    job_number,
    launch_address,
    launch_address_name,
    node_address,
    node_count,
    node_name,
    stale_world_claim,
    world_claim_names,
    world_claims,
)

TIMEOUT_ENV = "HPCR_RENDEZVOUS_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
STALE_WAIT_S = 5.0  # how long a rank whose SLURM variables have no step behind them waits (a peer may still come)
_ARRIVED_KEY = "hpc_runner/ranks_arrived"
_POLL_S = 0.1


def rendezvous_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Return how many seconds a rank waits for the others (``HPCR_RENDEZVOUS_TIMEOUT``, default 300)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds",
                          expected="a positive number of seconds, e.g. 300")
    return value


def rendezvous_wait(environ: Mapping[str, str] | None = None,
                    stale: Callable[[Mapping[str, str]], str | None] = stale_world_claim) -> tuple[float, str | None]:
    """Return how long this rank waits for the others, and why its environment looks stale (None when it does not).

    SLURM's variables claim several tasks but this process is no task of a step (``stale``, job_env's
    :func:`~hpc_runner.scheduler.job_env.stale_world_claim`): :data:`STALE_WAIT_S` seconds, not the default
    timeout, unless ``HPCR_RENDEZVOUS_TIMEOUT`` is set (a task in a container that hides its parents).
    """
    environ = os.environ if environ is None else environ
    timeout_s = rendezvous_timeout(environ)
    why = stale(environ)
    if why is not None and not environ.get(TIMEOUT_ENV, "").strip():
        timeout_s = min(timeout_s, STALE_WAIT_S)
    return timeout_s, why


class RendezvousInterrupted(ClusterError):
    """Ctrl-C (SIGINT) while a rank waited for the others: the paragraph, and exit code 130 (an interrupted command)."""

    exit_code = 130


def master_port(job_id: str | int) -> int:
    """Return the rendezvous port of a SLURM job: 20000 + job id mod 12000 (no two of 12000 jobs in a row share it).

    Below Linux's ephemeral range (32768 up), so the kernel does not hand the port to an outgoing connection.
    """
    return 20000 + int(job_id) % 12000


def is_loopback(address: str) -> bool:
    """Return True for 127.x.x.x and ::1 (an address other nodes cannot reach)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def resolve_host(host: str) -> str | None:
    """Return the IPv4 address ``host`` resolves to here (DNS, /etc/hosts), or None."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None


def master_address(
    host: str,
    *,
    this_host: str,
    resolve: Callable[[str], str | None],
    node_addr: Callable[[str], str | None],
    launch_ip: str | None,
    own_addr: Callable[[], str | None] | None = None,
    launch_name: str = "the launch address",
) -> tuple[str, str]:
    """Return ``(address, how it was found)`` of rank 0's node ``host``, an address this rank can reach.

    The name as resolved here when that is not loopback (or when this is that node); else SLURM's
    NodeAddr of the node (``scontrol show node``); else SLURM_LAUNCH_NODE_IPADDR (where srun ran: the
    batch host, which is the first node of a job); ClusterError when none of them gives an address.
    A loopback NodeAddr is reachable when this node's own NodeAddr (``own_addr()``) is loopback too:
    the controller reaches both nodes on loopback, so they are emulated on its one machine (the local
    cluster of scripts/local-slurm.sh: vm1 is 127.0.1.1, vm2 127.0.1.2).
    """
    ip = resolve(host)
    same_node = host.split(".")[0] == this_host.split(".")[0]
    if ip is not None and (not is_loopback(ip) or same_node):
        return ip, f"{host} resolves to {ip}"
    addr = node_addr(host)
    if addr and addr != host:
        addr_ip = addr if _is_ip(addr) else resolve(addr)
        if addr_ip and (not is_loopback(addr_ip) or same_node):
            return addr_ip, f"{host} is NodeAddr {addr} (scontrol show node)"
        mine = own_addr() if addr_ip and own_addr is not None else None
        if addr_ip and mine and is_loopback(mine):
            return addr_ip, (f"{host} is NodeAddr {addr} (scontrol show node), loopback like this node's "
                             f"{this_host} ({mine}): the nodes are emulated on one machine")
    if launch_ip:
        return launch_ip, f"{host} {'resolves to loopback ' + ip if ip else 'does not resolve'} here; " \
                          f"{launch_name} {launch_ip}"
    raise ClusterError(
        f"rank 0 runs on {host}, which {'resolves to the loopback address ' + ip if ip else 'does not resolve'} "
        "on this node, and SLURM gives no other address for it (scontrol show node, SLURM_LAUNCH_NODE_IPADDR)",
        expected="a node name that resolves to an address other nodes can reach, or MASTER_ADDR set in the job script",
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def rendezvous_plan(
    environ: Mapping[str, str] | None = None,
    address: Callable[[str], tuple[str, str]] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Return the torch.distributed variables to set for an srun task without torchrun, and how they were chosen.

    RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK (the node's index, SLURM_NODEID) come
    from SLURM's task ids; MASTER_ADDR is the address of the first host of the step's node list (where
    rank 0 runs; the job's list when there is no step list), found by ``address`` (default:
    :func:`master_address` with this node's resolver and scontrol); MASTER_PORT derives from the job
    id, so every rank computes the same one. Variables already set win (``MASTER_PORT=... srun ...``).
    """
    environ = os.environ if environ is None else environ
    if not srun_without_torchrun(environ):
        return {}, []
    rank, world = launched_world(environ)
    nodes = node_count(environ)
    values = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank(environ)),
        "LOCAL_WORLD_SIZE": str(world // nodes) if world % nodes == 0 else "",
        "GROUP_RANK": str(node_rank(environ)),
    }
    notes: list[str] = []
    if "MASTER_PORT" not in environ:
        found = job_number(environ)
        if found is not None:
            job, job_var = found
            values["MASTER_PORT"] = str(master_port(job))
            notes.append(f"port {values['MASTER_PORT']} from {job_var}={job}")
    if "MASTER_ADDR" not in environ:
        first = first_node(environ)
        if first is None:
            values["MASTER_ADDR"] = "127.0.0.1"
            notes.append("no SLURM node list: rank 0 on this node")
        else:
            host, variable = first
            find = address or _default_address(environ)
            values["MASTER_ADDR"], how = find(host)
            notes.append(f"rank 0 on {host}, the first node of {variable}: {how}")
    return {k: v for k, v in values.items() if v and k not in environ}, notes


def this_node(environ: Mapping[str, str]) -> str:
    """Return this node's name: SLURM's (SLURMD_NODENAME) inside a job, else the host name."""
    return node_name(environ) or socket.gethostname()


def own_node_addr(environ: Mapping[str, str]) -> Callable[[], str | None]:
    """Return a function that asks SLURM (once, when first called) for this node's NodeAddr as an address."""
    found: list[str | None] = []

    def ask() -> str | None:
        if not found:
            name = node_name(environ)
            addr = node_address(name) if name else None
            found.append(addr if addr is None or _is_ip(addr) else resolve_host(addr))
        return found[0]
    return ask


def _default_address(environ: Mapping[str, str]) -> Callable[[str], tuple[str, str]]:
    def find(host: str) -> tuple[str, str]:
        return master_address(host, this_host=this_node(environ), resolve=resolve_host,
                              node_addr=lambda h: node_address(h, environ), launch_ip=launch_address(environ),
                              own_addr=own_node_addr(environ),
                              launch_name=launch_address_name(environ) or "the launch address")
    return find


def rendezvous_env(
    environ: Mapping[str, str] | None = None, address: Callable[[str], tuple[str, str]] | None = None
) -> dict[str, str]:
    """Return the torch.distributed variables to set for an srun task without torchrun (empty otherwise)."""
    return rendezvous_plan(environ, address)[0]


def claimed_by(environ: Mapping[str, str]) -> str:
    """Return the variables that say this run has several processes, as ``NAME=value`` words."""
    return world_claims(environ)


# ---------------------------------------------------------------- the wait for every rank


def connect_store(
    rank: int,
    world: int,
    timeout_s: float,
    environ: Mapping[str, str] | None = None,
    stopped: Callable[[], str | None] | None = None,
    stale: str | None = None,
    launched: Mapping[str, str] | None = None,
) -> Any:
    """Return a TCPStore that every one of the ``world`` ranks has joined, waiting at most ``timeout_s``.

    Rank 0 listens on MASTER_PORT; the others connect to MASTER_ADDR:MASTER_PORT. Each rank adds one
    to a counter and polls it until it reaches ``world``; the wait (and the wait for rank 0 to listen)
    is a Python loop, so a signal is handled within 0.1 s: SIGINT, or ``stopped()`` naming a stop
    request (SIGTERM/SIGUSR2 under ``hpc-runner run``), ends it with a ClusterError, as the timeout does
    (SIGINT: its subclass :class:`RendezvousInterrupted`, exit code 130); ``stale`` (why the environment looks
    left over, :func:`rendezvous_wait`) is said in it, and the variables named are those of ``launched`` (the
    environment as the launcher left it, before :func:`rendezvous_plan`'s), else ``environ``'s. The store's
    timeout is then torch's default for the process group that uses it.
    """
    import torch.distributed as dist

    environ = os.environ if environ is None else environ
    addr = environ.get("MASTER_ADDR", "").strip()
    port = env_int(environ, "MASTER_PORT")
    if not addr or port is None:
        missing = " and ".join(n for n, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if not v)
        raise ClusterError(
            f"this process is rank {rank} of {world} ({claimed_by(environ)}) but {missing} is not set, so it "
            "cannot find rank 0",
            expected="MASTER_ADDR and MASTER_PORT (torchrun and srun with SLURM_JOB_ID give them), or the "
            "variables that claim several processes unset to run one",
        )
    deadline = time.monotonic() + timeout_s
    where = f"{addr}:{port}"
    claims = environ if launched is None else launched

    def check(arrived: int) -> None:
        reason = stopped() if stopped is not None else None
        if reason is not None:
            raise _gave_up(rank, world, where, arrived, f"stopped by {reason}", claims, timeout_s, stale)
        if time.monotonic() > deadline:
            raise _gave_up(rank, world, where, arrived, f"waited {timeout_s:g} s", claims, timeout_s, stale)

    store = None
    try:
        if rank == 0:
            try:
                store = dist.TCPStore(addr, port, world, True, timeout=timedelta(seconds=max(1.0, timeout_s)),
                                      wait_for_workers=False, multi_tenant=True)
            except RuntimeError as exc:
                raise ClusterError(
                    f"rank 0 cannot listen on {where} for the other ranks: {str(exc).splitlines()[0]}",
                    expected="a MASTER_PORT that no other program on this node uses",
                ) from None
        else:
            _wait_until_listening(addr, port, check)
            store = dist.TCPStore(addr, port, world, False,
                                  timeout=timedelta(seconds=max(1.0, deadline - time.monotonic())))
        store.add(_ARRIVED_KEY, 1)
        while (arrived := store.add(_ARRIVED_KEY, 0)) < world:
            check(arrived)
            time.sleep(_POLL_S)
    except KeyboardInterrupt:
        del store  # rank 0 stops listening now, not at exit
        raise _gave_up(rank, world, where, None, "interrupted (SIGINT)", claims, timeout_s, stale,
                       kind=RendezvousInterrupted) from None
    except ClusterError:
        del store  # rank 0 stops listening now, not at exit
        raise
    from torch.distributed.constants import default_pg_timeout

    store.set_timeout(default_pg_timeout)
    return store


def _wait_until_listening(addr: str, port: int, check: Callable[[int], None]) -> None:
    """Return once rank 0 accepts connections on ``addr:port``; ``check`` raises on a timeout or a signal."""
    while True:
        try:
            with socket.create_connection((addr, port), timeout=1.0):
                return
        except OSError:
            check(0)
            time.sleep(_POLL_S * 5)


def _gave_up(rank: int, world: int, where: str, arrived: int | None, why: str, environ: Mapping[str, str],
             timeout_s: float, stale: str | None = None, kind: type[ClusterError] = ClusterError) -> ClusterError:
    seen = f"; {arrived} of {world} ranks had arrived" if arrived else "; rank 0 was not listening" if rank else ""
    left = (f", and this process is no task of a SLURM step: {stale}, so the variables are left from another "
            "job or shell") if stale else ""
    hidden = "; a task in a container that hides its parents: set it to wait longer" if stale else ""
    return kind(
        f"rank {rank} of {world} gave up waiting for the other ranks at {where} ({why}{seen}). The environment "
        f"says this run has {world} processes ({claimed_by(environ)}), but they did not all start{left}; nothing "
        "was written",
        expected=f"`unset {' '.join(world_claim_names(environ))}` to run one process, or {world} processes started "
        f"together (`srun --ntasks={world} hpc-runner run ...`, torchrun --nproc-per-node={world})",
        hint=f"{TIMEOUT_ENV} sets how long a rank waits (now {timeout_s:g} s{hidden})",
    )


# ---------------------------------------------------------------- gloo's network interface


def interface_addresses() -> dict[str, str]:
    """Return each network interface's IPv4 address (Linux SIOCGIFADDR); interfaces without one are left out."""
    import fcntl
    import struct

    out: dict[str, str] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                out[name] = socket.inet_ntoa(packed[20:24])
    return out


def route_source(address: str) -> str | None:
    """Return this host's address on the route to ``address`` (a UDP connect sends nothing), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def gloo_interface(
    environ: Mapping[str, str],
    *,
    hostname: str,
    resolve: Callable[[str], str | None],
    interfaces: Mapping[str, str],
    route_to: Callable[[str], str | None],
    nodes: int,
    own_addr: Callable[[], str | None] | None = None,
) -> tuple[str | None, str]:
    """Return ``(GLOO_SOCKET_IFNAME to set or None, the line saying which interface gloo uses)``.

    torch's gloo takes GLOO_SOCKET_IFNAME when it is set, else the address this host's name resolves
    to, else loopback (ProcessGroupGloo::createDefaultDevice). A name that resolves to loopback (a
    common /etc/hosts entry) works on one node but leaves every other node unable to connect: with
    several nodes the interface that routes to MASTER_ADDR is chosen instead, unless this node's own
    NodeAddr (``own_addr()``) is loopback: then SLURM reaches the nodes on loopback, they are emulated
    on one machine, and gloo keeps the host name's address (each emulated node's own, 127.0.1.I).
    """
    chosen = environ.get("GLOO_SOCKET_IFNAME", "").strip()
    if chosen:
        names = [n.strip() for n in chosen.split(",") if n.strip()]
        unknown = [n for n in names if n not in interfaces]
        if unknown:
            raise ClusterError(
                f"GLOO_SOCKET_IFNAME={chosen!r} names {', '.join(unknown)}, which this node does not have",
                expected=f"one of this node's interfaces: {', '.join(sorted(interfaces)) or '(none found)'}",
            )
        shown = ", ".join(f"{n} ({interfaces[n]})" for n in names)
        return None, f"gloo uses interface {shown}: GLOO_SOCKET_IFNAME"
    ip = resolve(hostname)
    by_address = {a: n for n, a in interfaces.items()}
    if ip is not None and not is_loopback(ip) and ip in by_address:
        return None, (f"gloo uses interface {by_address[ip]} ({ip}), the address of this host's name "
                      f"{hostname}; set GLOO_SOCKET_IFNAME to choose another")
    if ip is None:
        said = "does not resolve"
    elif is_loopback(ip):
        said = f"resolves to the loopback address {ip}"
    else:  # gloo binds to test the address: one that is not this host's falls back to loopback too
        said = f"resolves to {ip}, which is no address of this host"
    if nodes <= 1:
        return None, f"gloo uses loopback: this host's name {hostname} {said} (fine on one node)"
    mine = own_addr() if own_addr is not None and (ip is None or is_loopback(ip)) else None
    if mine and is_loopback(mine):
        return None, (f"gloo uses loopback ({ip or '127.0.0.1'}): this host's name {hostname} {said}, and SLURM "
                      f"reaches this node at {mine}: the nodes are emulated on one machine")
    master = environ.get("MASTER_ADDR", "")
    source = route_to(master) if master else None
    name = by_address.get(source or "")
    if name is None or is_loopback(source or ""):
        raise ClusterError(
            f"this host's name {hostname} {said}, so gloo would listen where the other {nodes - 1} nodes cannot "
            f"connect, and no interface of this node routes to MASTER_ADDR={master or '(unset)'}",
            expected="GLOO_SOCKET_IFNAME set to the interface the nodes share (e.g. ib0 or eth0)",
        )
    return name, (f"gloo uses interface {name} ({source}), the route to MASTER_ADDR {master}: this host's name "
                  f"{hostname} {said}; set GLOO_SOCKET_IFNAME to choose another")


def choose_gloo_interface(environ: Mapping[str, str] | None = None) -> str:
    """Decide gloo's interface for this process, set GLOO_SOCKET_IFNAME when it had to choose; return the line."""
    environ = os.environ if environ is None else environ
    name, line = gloo_interface(environ, hostname=socket.gethostname(), resolve=resolve_host,
                                interfaces=interface_addresses(), route_to=route_source, nodes=node_count(environ),
                                own_addr=own_node_addr(environ))
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = name  # read by torch's C++ when it makes a gloo group
    return line
