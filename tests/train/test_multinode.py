"""More than one machine: two torchrun agents on this machine, one process each, meeting through c10d's
rendezvous on 127.0.0.1, as two nodes would (docs/fsdp.md#more-than-one-machine).

The one-node references (``--nproc-per-node 2``) are the suite's own, made once a session:
test_fsdp_resume.py's ``reference`` run of the CLI under ``--fsdp`` and test_distributed.py's DDP
Trainer runs. The two-node run of the same command must end where they ended, bit for bit. A node lost
mid-run is node 1's process killed right after its first checkpoint (tests/finetune_dies_after_save.py):
node 0 must end at once with one line naming that checkpoint, and the checkpoint must be whole and
equal the reference's checkpoint of the same step, which test_fsdp_resume.py resumes, on one node with
two processes, to the reference's end.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import free_port, made_once, without_timings
from launch_output import error_lines
from test_distributed import ddp_runs  # noqa: F401  (its fixture, asked for by one_node_ddp)

from mixft import distributed
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.train.sharded_checkpoint import verify_sharded_checkpoint
from tests.runs.test_fsdp_resume import (  # the one-node reference run and how the resume tests read it
    args,
    assert_equal_tensors,
    reference,  # noqa: F401  (its fixture, asked for by one_node)
    run_of,
    saved_model,
    sharded_state,
)

ROOT = Path(__file__).resolve().parents[2]
STEPS = 8  # the reference: 16 sentences, 2 per process x 2 processes, 2 epochs


@dataclass
class Node:
    """One torchrun agent's outcome: its exit code, what it (and its process) printed, when it ended."""

    returncode: int
    stdout: str
    stderr: str
    ended: float  # time.monotonic() when the agent exited


def on_nodes(*commands: list[str], env: dict | None = None, rdzv_conf: str | None = None, timeout=300) -> list[Node]:
    """Each command (a script and its arguments) under its own torchrun agent, all of them one job of
    two nodes with one process each (docs/fsdp.md's command). Node 0's agent starts first and hosts the
    rendezvous, as the node named by --rdzv-endpoint does; the others start once it listens.

    Usage: ``node0, node1 = on_nodes(["scripts/finetune.py", ...], ["scripts/finetune.py", ...])``
    """
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MIXFT_DIST_BACKEND": "gloo", "PYTHONPATH": str(ROOT), **(env or {})}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
    launcher += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    launcher += ["--rdzv-conf", rdzv_conf] if rdzv_conf else []
    with tempfile.TemporaryDirectory() as logs:
        outs = [(open(f"{logs}/{i}.out", "w+"), open(f"{logs}/{i}.err", "w+")) for i in range(len(commands))]
        agents, ended = [], {}
        try:
            for i, command in enumerate(commands):
                if i == 1:
                    _wait_until_listening(port, agents[0])
                agents.append(
                    subprocess.Popen([*launcher, *command], cwd=ROOT, env=env, stdout=outs[i][0], stderr=outs[i][1])
                )
            deadline = time.monotonic() + timeout
            while len(ended) < len(agents) and time.monotonic() < deadline:
                for i, agent in enumerate(agents):
                    if i not in ended and agent.poll() is not None:
                        ended[i] = time.monotonic()
                time.sleep(0.05)
        finally:
            for agent in agents:
                if agent.poll() is None:
                    agent.kill()  # a hang: the assertion below says so; no process is left behind
                    agent.wait()
        assert len(ended) == len(agents), f"a torchrun agent still ran after {timeout} s"
        nodes = []
        for i, agent in enumerate(agents):
            for f in outs[i]:
                f.seek(0)
            nodes.append(Node(agent.returncode, outs[i][0].read(), outs[i][1].read(), ended[i]))
            for f in outs[i]:
                f.close()
    return nodes


def _wait_until_listening(port: int, agent: subprocess.Popen, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and agent.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"node 0's torchrun did not listen on {port} within {limit_s} s")


def finetune_argv(*argv: str) -> list[str]:
    return ["scripts/finetune.py", *argv]


@pytest.fixture(scope="module")
def one_node(request):
    """test_fsdp_resume.py's reference run (one node, two processes; made once a session): (model, data, out)."""
    return request.getfixturevalue("reference")


@pytest.fixture(scope="module")
def one_node_ddp(request):
    """test_distributed.py's DDP runs (one node, two processes; made once a session): {run: [rank 0's, rank 1's]}."""
    return request.getfixturevalue("ddp_runs")


@pytest.fixture(scope="module")
def two_nodes_fsdp(one_node, tmp_path_factory):
    """The reference's command on two nodes of one process each: its output directory, and both nodes' outcomes."""
    model, data, _ = one_node

    def train(folder):
        command = finetune_argv(*args(model, data, folder / "out", "--fsdp", "--save-model"))
        nodes = on_nodes(command, command)
        (folder / "nodes.json").write_text(json.dumps([n.__dict__ for n in nodes]))
        assert [n.returncode for n in nodes] == [0, 0], nodes[0].stderr[-6000:] + nodes[1].stderr[-6000:]

    folder = made_once(tmp_path_factory, "multinode-fsdp", train)
    return folder / "out", [Node(**n) for n in json.loads((folder / "nodes.json").read_text())]


def test_fsdp_on_two_nodes_equals_one_node_with_two_processes(one_node, two_nodes_fsdp, tmp_path):
    _, _, ref = one_node
    out, nodes = two_nodes_fsdp
    printed = nodes[0].stdout + nodes[1].stdout
    assert printed.count("mixft run") == 1 and "sharding   FSDP2 over 2 processes" in printed  # rank 0 alone
    # results.json: every metric, step, loss, best and last evaluation (clocks and gauges aside).
    assert without_timings(run_of(out)) == without_timings(run_of(ref))
    assert run_of(out)["steps"] == STEPS
    # The weights, AdamW's moments and the best weights in the last checkpoint, and the saved model: bit for bit.
    two, one = sharded_state(out / "checkpoint.dcp", tmp_path), sharded_state(ref / "checkpoint.dcp", tmp_path)
    assert_equal_tensors(two["model"], one["model"])
    assert_equal_tensors(two["optimizers"]["state"], one["optimizers"]["state"])
    assert_equal_tensors(two["states"]["best_model/weights"], one["states"]["best_model/weights"])
    assert_equal_tensors(saved_model(out / "model"), saved_model(ref / "model"))
    # The manifest records the number of processes, not of nodes: one node with two processes resumes it
    # (test_a_node_lost_mid_run_... below: the two-node checkpoint it keeps equals the one-node run's, which
    # test_fsdp_resume.py resumes on one node).
    written = [json.loads((d / "checkpoint.dcp" / "mixft-manifest.json").read_text()) for d in (out, ref)]
    assert [m["world_size"] for m in written] == [2, 2]
    assert meta_but_when(written[0]) == meta_but_when(written[1])


def meta_but_when(manifest: dict) -> dict:
    """A sharded checkpoint's recorded meta, but for the only fields two equal saves differ in: when it was
    written, and how long that took."""
    return {k: v for k, v in manifest["meta"].items() if k not in ("saved", "checkpoint_time_s")}


def test_ddp_on_two_nodes_equals_one_node_with_two_processes(one_node_ddp, tmp_path):
    # tests/ddp_worker.py's DDP Trainer runs, the reference being test_distributed.py's launch of them.
    runs = ["fp32:1", "fp32:2"]  # without and with accumulation (DDP's no_sync on all but a window's last)
    nodes = on_nodes(*[["tests/ddp_worker.py", str(tmp_path / "ddp"), ",".join(runs)]] * 2)
    assert [n.returncode for n in nodes] == [0, 0], nodes[0].stderr[-6000:] + nodes[1].stderr[-6000:]
    ranks = [torch.load(tmp_path / f"ddp.rank{r}") for r in range(2)]
    for run in runs:
        for rank in range(2):
            two, one = dict(ranks[rank][run]), dict(one_node_ddp[run][rank])
            assert two["world"] == 2 and torch.equal(two.pop("weights"), one.pop("weights"))  # fp32, bit for bit
            assert without_timings(two) == without_timings(one)  # steps, samples, evaluation, no_sync calls


def test_a_node_lost_mid_run_ends_the_other_in_one_line_and_its_checkpoint_continues(
    one_node, two_nodes_fsdp, tmp_path
):
    model, data, ref = one_node
    two_node_out, _ = two_nodes_fsdp
    out = tmp_path / "out"
    out.mkdir()
    # The two-node run's checkpoint of step 6, resumed on two nodes; node 1's process dies (SIGKILL) as soon
    # as the save of step 7 returns, and node 0 goes on into step 8's first collective.
    shutil.copytree(two_node_out / "checkpoint-step6.dcp", out / "checkpoint.dcp")
    death = tmp_path / "death"
    command = args(model, data, out, "--fsdp", "--save-model", "--resume")
    node0, node1 = on_nodes(
        finetune_argv(*command),
        ["tests/finetune_dies_after_save.py", *command],
        env={"MIXFT_TEST_DEATH_FILE": str(death), "MIXFT_DIST_TIMEOUT": "120"},
    )
    died_at, died_after_step = death.read_text().split()
    assert died_after_step == "7" and node1.returncode == 1 and "(SIGKILL)" in node1.stderr
    # Node 0: one line from mixft, then torchrun's own report of its process's exit code 5.
    lines = error_lines(node0.stderr, "finetune.py")
    assert len(lines) == 1, node0.stderr[-6000:]
    line, checkpoint = lines[0], out / "checkpoint.dcp"
    assert line.startswith("finetune.py: error: another process of this run is gone (gloo: "), line
    assert line.endswith(
        f"the last checkpoint, {checkpoint} (step 7), is kept: rerun the same command with --resume on every node"
    )
    assert "Timed out" not in line  # the dead process's connections closed: no waiting for the timeout
    assert node0.returncode == 1 and "exitcode  : 5 " in node0.stderr and "ChildFailedError" in node0.stderr
    assert f'File "{ROOT / "mixft"}' not in node0.stderr and "[rank0]:" not in node0.stderr  # no traceback of ours
    ended_after = node0.ended - float(died_at)
    assert ended_after < 60, ended_after  # measured 1.5 to 1.9 s (docs/fsdp.md); 120 s: the timeout
    assert not (out / "results.json").exists()
    # The checkpoint it names is whole (every file's CRC) and is, tensor for tensor, what the run never
    # stopped wrote at step 7 (weights, AdamW's moments, the best weights), its record the same but for
    # when it was written: test_fsdp_resume.py resumes that checkpoint, on one node with two processes,
    # to the run's end, bit for bit. (The manifest counts processes, not nodes.)
    kept, never = (verify_sharded_checkpoint(c, world_size=2) for c in (checkpoint, ref / "checkpoint-step7.dcp"))
    assert sorted(kept["files"]) == sorted(never["files"]) and kept["meta"]["step"] == 7
    assert meta_but_when(kept) == meta_but_when(never)
    lost, whole = sharded_state(checkpoint, tmp_path), sharded_state(ref / "checkpoint-step7.dcp", tmp_path)
    assert_equal_tensors(lost, whole)
    assert loop_states(lost) == loop_states(whole)


def loop_states(state: dict) -> list:
    """Each process's loop state in a sharded checkpoint (steps, history, RNG states, early stopping...) as
    plain values, clocks aside."""
    import io

    def plain(value):
        if isinstance(value, torch.Tensor):
            return value.tolist()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return [plain(v) for v in value] if isinstance(value, (list, tuple)) else value

    rests = [torch.load(io.BytesIO(blob), weights_only=True) for key, blob in sorted(state.items()) if "rank" in key]
    return [plain(without_timings(rest)) for rest in rests]


def test_a_node_that_never_joins_ends_the_other_at_the_rendezvous_timeout_before_mixft_starts(tmp_path):
    out = tmp_path / "out"
    start = time.monotonic()
    (node0,) = on_nodes(
        finetune_argv("--recipe", "bert-sst2", "--output-dir", str(out), "--no-progress"), rdzv_conf="join_timeout=3"
    )
    assert node0.returncode == 1 and "RendezvousTimeoutError" in node0.stderr
    assert node0.stdout == "" and not out.exists()  # no process was started: mixft never ran
    assert node0.ended - start < 60, node0.ended - start  # 3 s of waiting, plus torchrun's start


# -------------------------------------------------------------- the pieces, without launching


def test_the_collective_timeout_is_600_s_unless_mixft_dist_timeout_says_otherwise(monkeypatch):
    monkeypatch.delenv("MIXFT_DIST_TIMEOUT", raising=False)
    assert distributed.collective_timeout() == datetime.timedelta(seconds=600)
    monkeypatch.setenv("MIXFT_DIST_TIMEOUT", " 7.5 ")
    assert distributed.collective_timeout() == datetime.timedelta(seconds=7.5)
    for bad in ("0", "-3", "ten", "inf", "nan"):
        monkeypatch.setenv("MIXFT_DIST_TIMEOUT", bad)
        with pytest.raises(UsageError, match=f"MIXFT_DIST_TIMEOUT must be a positive number of seconds, got '{bad}'"):
            distributed.collective_timeout()


def test_the_process_group_is_joined_with_that_timeout_and_a_bad_one_joins_none(monkeypatch):
    joined = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend, **kw: joined.append((backend, kw)))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MIXFT_DIST_BACKEND", "gloo")
    monkeypatch.setenv("MIXFT_DIST_TIMEOUT", "42")
    assert distributed.init_from_env("cpu")
    assert joined == [("gloo", {"timeout": datetime.timedelta(seconds=42)})]
    monkeypatch.setenv("MIXFT_DIST_TIMEOUT", "soon")
    with pytest.raises(UsageError):
        distributed.init_from_env("cpu")
    assert len(joined) == 1


def test_the_backend_follows_the_runs_device_not_whether_the_machine_has_a_gpu(monkeypatch):
    # A --device cpu run under torchrun on a machine with GPUs: gloo (NCCL reduces CUDA tensors only).
    joined, devices = [], []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend, **kw: joined.append(backend))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", devices.append)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("MIXFT_DIST_BACKEND", raising=False)
    monkeypatch.delenv("MIXFT_DIST_TIMEOUT", raising=False)
    assert distributed.init_from_env("cpu") and distributed.init_from_env("cuda")
    assert joined == ["gloo", "nccl"] and devices == [1]  # each rank on its own GPU, only for NCCL
    monkeypatch.setenv("MIXFT_DIST_BACKEND", "gloo")  # asked for: gloo for CUDA too
    assert distributed.init_from_env("cuda") and joined[-1] == "gloo"


def gloo_pair(timeout: datetime.timedelta):
    """Two gloo process groups of one world of 2, in this process (each needs the other to connect)."""
    store, groups = torch.distributed.HashStore(), [None, None]

    def join(rank):
        groups[rank] = torch.distributed.ProcessGroupGloo(store, rank, 2, timeout)

    threads = [threading.Thread(target=join, args=(rank,)) for rank in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return groups


def gloo_error(group) -> RuntimeError:
    with pytest.raises(RuntimeError) as caught:
        group.allreduce([torch.ones(2)]).wait()
    return caught.value


def test_lost_peer_reads_what_gloo_raises_when_the_other_process_is_silent_or_gone(monkeypatch):
    # gloo's own errors, not copies of their text: a peer that does not answer within the timeout
    # (a node cut off), then one whose connections close (a process killed on a node that stays up).
    monkeypatch.setenv("MIXFT_DIST_TIMEOUT", "1")
    first, _ = gloo_pair(distributed.collective_timeout())
    assert distributed.lost_peer(gloo_error(first)) == "gloo: Timed out waiting 1000ms for recv operation to complete"
    first, second = gloo_pair(distributed.collective_timeout())  # a fresh pair: gloo closes one after a timeout
    del second
    gone = gloo_error(first)
    words = distributed.lost_peer(gone)
    assert words.startswith("gloo: Connection closed by peer [127.0.0.1]:") and "GLHF" not in words, words
    try:  # as FSDP or DCP would re-raise it
        raise RuntimeError("a collective failed") from gone
    except RuntimeError as wrapped:
        assert distributed.lost_peer(wrapped) == words
    # The rendezvous store's host gone (its node's torchrun): torch's own type says it.
    store_gone = torch.distributed.DistNetworkError("Failed to recv, got 0 bytes. Connection was likely closed.")
    assert (
        distributed.lost_peer(store_gone)
        == "DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed."
    )
    assert distributed.lost_peer(RuntimeError("CUDA out of memory")) is None
    assert distributed.lost_peer(ValueError("Timed out waiting")) is None


def test_the_line_names_the_checkpoint_written_last_and_its_step(tmp_path):
    from mixft.cli.peer_lost import last_checkpoint, peer_lost_line

    gone = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:4711"
    )
    assert peer_lost_line(gone, "finetune.py", tmp_path) == (
        "finetune.py: error: another process of this run is gone (gloo: Connection closed by peer [10.0.0.2]:4711); "
        "no checkpoint was written yet: rerun the same command on every node to start again"
    )
    assert peer_lost_line(ValueError("no"), "finetune.py", tmp_path) is None
    # A one-file checkpoint (DDP's, written by process 0) and a sharded one of a later run, with a kept copy.
    torch.save({"format": "mixft-checkpoint", "version": 1, "meta": {"step": 3}}, tmp_path / "checkpoint-fp32-seed0.pt")
    for name, step in (("checkpoint-bf16-seed0.dcp", 5), ("checkpoint-bf16-seed0-step5.dcp", 5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mixft-manifest.json").write_text(json.dumps({"meta": {"step": step}}))
    os.utime(tmp_path / "checkpoint-fp32-seed0.pt", (1, 1))
    assert last_checkpoint(tmp_path) == (tmp_path / "checkpoint-bf16-seed0.dcp", 5)
    os.utime(tmp_path / "checkpoint-bf16-seed0.dcp" / "mixft-manifest.json", (0, 0))
    assert last_checkpoint(tmp_path) == (tmp_path / "checkpoint-fp32-seed0.pt", 3)
    # A save that a death interrupted between its two renames: the previous one, where --resume finds it.
    (tmp_path / "checkpoint-bf16-seed0.dcp").rename(tmp_path / ".checkpoint-bf16-seed0.dcp.old")
    os.utime(tmp_path / ".checkpoint-bf16-seed0.dcp.old" / "mixft-manifest.json", (2, 2))
    assert last_checkpoint(tmp_path) == (tmp_path / "checkpoint-bf16-seed0.dcp", 5)
    assert peer_lost_line(gone, "finetune.py", tmp_path).endswith(
        f"the last checkpoint, {tmp_path / 'checkpoint-bf16-seed0.dcp'} (step 5), is kept: "
        "rerun the same command with --resume on every node"
    )


GLOO_CLOSED = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4711"


@pytest.mark.parametrize("rank", [0, 1])
def test_a_process_lost_after_training_is_one_line_not_a_traceback(rank, tmp_path, monkeypatch, capsys):
    # The last barrier (distributed.shutdown) breaks when a process is gone at the very end: process 0
    # has written the results and says they stand (exit 0); another says it cannot tell (exit 5).
    from mixft import distributed
    from mixft.cli import main as cli_main

    def barrier_broken():
        raise RuntimeError(GLOO_CLOSED)

    monkeypatch.setattr(distributed, "shutdown", barrier_broken)  # read when the CLI leaves the job
    monkeypatch.setattr(distributed, "is_main_process", lambda: rank == 0)
    monkeypatch.setenv("LOCAL_RANK", "0")
    cfg = RunConfig(recipe="bert-sst2", output_dir=str(tmp_path))
    code = cli_main._leave_the_job("finetune.py", cfg)
    (line,) = capsys.readouterr().err.strip().splitlines()
    words = "(gloo: Connection closed by peer [10.0.0.2]:4711)"
    if rank == 0:
        assert code == 0
        assert line == f"finetune.py: warning: another process of this run ended before the job did {words}; " + (
            f"the results in {tmp_path} are complete"
        )
    else:
        assert code == cli_main.EXIT_PEER_LOST == 5
        assert line == f"finetune.py: error: another process of this run is gone at its end {words}; " + (
            f"{tmp_path / 'results.json'} is complete only if process 0 wrote it"
        )


def test_any_other_error_at_the_last_barrier_is_raised(tmp_path, monkeypatch):
    from mixft import distributed
    from mixft.cli import main as cli_main

    def bug():
        raise RuntimeError("something else")

    monkeypatch.setattr(distributed, "shutdown", bug)
    with pytest.raises(RuntimeError, match="something else"):
        cli_main._leave_the_job("finetune.py", RunConfig(recipe="bert-sst2", output_dir=str(tmp_path)))
