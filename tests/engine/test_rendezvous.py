"""How ranks find each other: rank 0's address from SLURM's node list, the port, the node rank, gloo's
interface, and the bounded, interruptible wait for the other ranks (through the real CLI)."""

from __future__ import annotations

import socket
import time

import pytest

from hpc_runner.engine.rendezvous import (
    STALE_WAIT_S,
    RendezvousInterrupted,
    connect_store,
    gloo_interface,
    interface_addresses,
    master_address,
    master_port,
    rendezvous_plan,
    rendezvous_timeout,
    rendezvous_wait,
    route_source,
)
from hpc_runner.errors import ClusterError, ConfigError

# task 2 of a 4-task step on 2 nodes, as srun sets it (SLURM 22.05)
SRUN_TASK_2 = {
    "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_STEP_NUM_NODES": "2",
}
RESOLVES = {"gpu03": "10.1.0.3", "gpu04": "10.1.0.4", "vm": "127.0.0.1", "gpu07": "127.0.1.1"}


def where(host: str, this_host: str = "gpu04", node_addrs: dict | None = None, launch_ip: str | None = None):
    """master_address with a name service and scontrol given as tables."""
    return master_address(host, this_host=this_host, resolve=RESOLVES.get,
                          node_addr=(node_addrs or {}).get, launch_ip=launch_ip)


def test_rank_0s_address_is_what_its_name_resolves_to():
    assert where("gpu03") == ("10.1.0.3", "gpu03 resolves to 10.1.0.3")


def test_a_name_that_does_not_resolve_falls_back_to_slurms_node_addr_then_the_launch_node():
    assert where("gpu09", node_addrs={"gpu09": "10.1.0.9"})[0] == "10.1.0.9"
    assert where("gpu09", launch_ip="10.1.0.99")[0] == "10.1.0.99"
    with pytest.raises(ClusterError, match="gpu09, which does not resolve"):
        where("gpu09")


def test_a_loopback_answer_is_kept_on_rank_0s_own_node_and_replaced_elsewhere():
    assert where("vm", this_host="vm") == ("127.0.0.1", "vm resolves to 127.0.0.1")  # one-node local cluster
    assert where("gpu07", node_addrs={"gpu07": "10.1.0.7"})[0] == "10.1.0.7"  # /etc/hosts: 127.0.1.1 gpu07
    with pytest.raises(ClusterError, match=r"loopback address 127\.0\.1\.1"):
        where("gpu07")


def test_srun_tasks_get_rank_local_rank_world_node_rank_address_and_port_from_slurm():
    env, notes = rendezvous_plan(SRUN_TASK_2, address=lambda h: (RESOLVES[h], "table"))
    assert env == {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                   "MASTER_ADDR": "10.1.0.3", "MASTER_PORT": str(master_port(4242))}
    assert any("first node of SLURM_JOB_NODELIST" in n for n in notes)


def test_the_step_node_list_wins_over_the_jobs_since_rank_0_runs_on_the_steps_first_node():
    env, _ = rendezvous_plan({**SRUN_TASK_2, "SLURM_STEP_NODELIST": "gpu04"}, address=lambda h: (RESOLVES[h], ""))
    assert env["MASTER_ADDR"] == "10.1.0.4"


def test_every_rank_derives_the_same_port_from_the_job_id_unless_one_is_set():
    ports = {rendezvous_plan({**SRUN_TASK_2, "SLURM_PROCID": str(r)}, address=lambda h: (h, ""))[0]["MASTER_PORT"]
             for r in range(4)}
    assert ports == {str(master_port(4242))}
    assert "MASTER_PORT" not in rendezvous_plan({**SRUN_TASK_2, "MASTER_PORT": "29500"}, address=lambda h: (h, ""))[0]


def test_the_rendezvous_timeout_is_a_positive_number_of_seconds():
    assert rendezvous_timeout({}) == 300
    assert rendezvous_timeout({"HPCR_RENDEZVOUS_TIMEOUT": "2.5"}) == 2.5
    for bad in ("soon", "0", "-1"):
        with pytest.raises(ConfigError, match="HPCR_RENDEZVOUS_TIMEOUT"):
            rendezvous_timeout({"HPCR_RENDEZVOUS_TIMEOUT": bad})


INTERFACES = {"lo": "127.0.0.1", "eth0": "10.1.0.4", "ib0": "192.168.5.4"}


def gloo(env: dict, hostname_ip: str | None, nodes: int):
    return gloo_interface(env, hostname="gpu04", resolve=lambda h: hostname_ip, interfaces=INTERFACES,
                          route_to={"10.1.0.3": "10.1.0.4"}.get, nodes=nodes)


def test_gloo_socket_ifname_is_honoured_and_named_and_an_unknown_one_refused():
    assert gloo({"GLOO_SOCKET_IFNAME": "ib0"}, "127.0.1.1", 2) == (
        None, "gloo uses interface ib0 (192.168.5.4): GLOO_SOCKET_IFNAME")
    with pytest.raises(ClusterError, match="names ib1, which this node does not have"):
        gloo({"GLOO_SOCKET_IFNAME": "ib1"}, "10.1.0.4", 2)


def test_gloo_says_which_interface_its_host_name_gives():
    name, line = gloo({}, "10.1.0.4", 2)
    assert name is None and line.startswith("gloo uses interface eth0 (10.1.0.4)")


def test_a_host_name_on_loopback_gets_the_interface_that_routes_to_rank_0_on_several_nodes():
    name, line = gloo({"MASTER_ADDR": "10.1.0.3"}, "127.0.1.1", nodes=2)
    assert name == "eth0" and "the route to MASTER_ADDR 10.1.0.3" in line
    assert gloo({"MASTER_ADDR": "10.1.0.3"}, "127.0.1.1", nodes=1)[0] is None  # loopback is fine on one node
    with pytest.raises(ClusterError, match="GLOO_SOCKET_IFNAME"):
        gloo({"MASTER_ADDR": "10.9.9.9"}, None, nodes=2)  # no route: say what to set


def test_this_nodes_interfaces_and_routes_are_read_from_the_kernel():
    assert interface_addresses().get("lo") == "127.0.0.1"
    assert route_source("127.0.0.1") == "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rank_0_alone_gives_up_after_the_timeout_and_stops_listening():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "WORLD_SIZE": "2"}
    t0 = time.monotonic()
    with pytest.raises(ClusterError, match=r"rank 0 of 2 gave up waiting .*waited 1 s; 1 of 2 ranks had arrived"):
        connect_store(0, 2, 1.0, env)
    assert time.monotonic() - t0 < 10
    with socket.socket() as s:  # the port is free again: nothing left listening
        s.bind(("127.0.0.1", int(env["MASTER_PORT"])))


def test_variables_left_in_a_shell_wait_a_few_seconds_unless_the_timeout_is_set():
    left = {**SRUN_TASK_2}
    assert rendezvous_wait(left, stale=lambda env: None) == (300.0, None)
    assert rendezvous_wait(left, stale=lambda env: "no slurmstepd") == (STALE_WAIT_S, "no slurmstepd")
    set_by_hand = {**left, "HPCR_RENDEZVOUS_TIMEOUT": "600"}  # a container hiding the parents: the user's word wins
    assert rendezvous_wait(set_by_hand, stale=lambda env: "no slurmstepd") == (600.0, "no slurmstepd")


def test_ctrl_c_ends_the_wait_with_the_paragraph_and_exit_code_130():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "WORLD_SIZE": "2"}
    launched = {"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}

    def ctrl_c() -> str | None:
        raise KeyboardInterrupt

    with pytest.raises(RendezvousInterrupted) as caught:
        connect_store(0, 2, 60.0, env, stopped=ctrl_c, stale="none of its parent processes is slurmstepd",
                      launched=launched)
    said = caught.value.paragraph()
    assert caught.value.exit_code == 130 and "interrupted (SIGINT)" in said and "no task of a SLURM step" in said
    assert "(SLURM_NTASKS=2 SLURM_PROCID=0 SLURM_STEP_ID=0)" in said and "RANK=0" not in said
    assert "`unset SLURM_NTASKS SLURM_PROCID SLURM_STEP_ID`" in said and "srun --ntasks=2" in said
    with socket.socket() as s:  # rank 0 stopped listening
        s.bind(("127.0.0.1", int(env["MASTER_PORT"])))


def test_a_stop_request_ends_the_wait_at_once():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "1", "WORLD_SIZE": "2"}
    with pytest.raises(ClusterError, match="stopped by SIGTERM; rank 0 was not listening"):
        connect_store(1, 2, 60.0, env, stopped=lambda: "SIGTERM")


# the local cluster of scripts/local-slurm.sh: nodes emulated on one machine, each its own loopback address
EMULATED = {"vm1": "127.0.1.1", "vm2": "127.0.1.2"}


def test_a_loopback_node_addr_is_reachable_when_this_nodes_own_is_loopback_too():
    """The controller reaches both nodes on loopback, so they share its machine (emulated nodes)."""
    addr, how = master_address("vm1", this_host="vm2", resolve=EMULATED.get, node_addr=EMULATED.get,
                               launch_ip="127.0.0.1", own_addr=lambda: "127.0.1.2")
    assert addr == "127.0.1.1" and "the nodes are emulated on one machine" in how
    # on a real cluster this node's NodeAddr is not loopback: a loopback answer for rank 0 is not reachable
    addr, how = master_address("vm1", this_host="vm2", resolve=EMULATED.get, node_addr=EMULATED.get,
                               launch_ip="10.1.0.2", own_addr=lambda: "10.1.0.2",
                               launch_name="SLURM_LAUNCH_NODE_IPADDR")  # the job side names where it came from
    assert addr == "10.1.0.2" and "SLURM_LAUNCH_NODE_IPADDR" in how


def test_gloo_keeps_an_emulated_nodes_own_loopback_address():
    name, line = gloo_interface({"MASTER_ADDR": "127.0.1.1"}, hostname="vm2", resolve=EMULATED.get,
                                interfaces={"lo": "127.0.0.1"}, route_to=lambda a: "127.0.0.1", nodes=2,
                                own_addr=lambda: "127.0.1.2")
    assert name is None and "gloo uses loopback (127.0.1.2)" in line and "emulated on one machine" in line
    with pytest.raises(ClusterError, match="GLOO_SOCKET_IFNAME"):  # a real node whose name says loopback
        gloo_interface({"MASTER_ADDR": "10.1.0.3"}, hostname="gpu04", resolve=lambda h: "127.0.1.1",
                       interfaces={"lo": "127.0.0.1"}, route_to=lambda a: None, nodes=2, own_addr=lambda: "10.1.0.4")
