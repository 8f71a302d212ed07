"""Data-parallel training of a compiled ragged model under
``torch.nn.parallel.DistributedDataParallel``: two processes on this machine
(gloo, ``tcp://127.0.0.1``), each with its own ragged batch (different batch
sizes, different lengths, items of length 1), train two SGD steps; after
DDP's all-reduce both ranks hold the same gradients, equal to those of one
fp64 eager model on the union of the two batches (every item run alone).

How the model is compiled: ``DDP(torch.compile(model, fullgraph=True))``.
``torch.compile(DDP(model), fullgraph=True)`` is refused by Dynamo itself
(torch 2.13: DDP's ``_pre_forward`` calls ``Logger.set_runtime_stats_and_log``,
which it cannot trace); without ``fullgraph`` that order works too (graph
breaks around DDP's own code, the module's forward is one graph), but the
test keeps ``fullgraph``: no graph break in the model.

Dynamo's DDPOptimizer (``torch._dynamo.config.optimize_ddp``, on by default)
is active in both orders: it splits the model's graph at DDP's gradient
bucket boundaries and hands each piece to the backend, so that a bucket's
all-reduce starts while the backward of the earlier pieces still runs. The
ragged backend needs no change for it: each piece compiles as a forward and
a backward graph (the packed values cross the boundary as a plain tensor,
the piece that pools takes the offsets as an input). The test makes the split happen (small buckets, below) and checks
that it did (two forward graphs per rank), that every graph compiled (no
fallback: ``RAGGED_FALLBACK=0`` in the workers), that the backward graphs
went through the backend (``debug_dir``: ``fx_graph.txt`` files of backward
graphs, with the mean pooling's ragged adjoint ``ragged.segment_broadcast``)
and that the second step, with other lengths and batch sizes, compiled
nothing new.

The loss of each rank is a sum over its items scaled by
``world_size / total items`` (the total all-reduced): DDP averages the
ranks' gradients, so the result is the gradient of the mean loss over the
union, whatever each rank's batch size.

The model is a pre-norm residual MLP on the tokens, mean pooling over each
item's tokens and a linear head: attention is left out to keep the IREE
compiles short (with a ``TransformerEncoderLayer`` the first step takes
~170 s with two ranks on a 2-core machine; ``test_training.py`` covers
attention's gradients).
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORLD = 2
D = 16
CLASSES = 3
SEED = 0
# Per step, per rank: the items' lengths. The ranks' batch sizes differ (3
# and 2, then 2 and 4), as do their token counts; every step has an item of
# length 1. The second step runs on the graphs of the first.
LENGTHS = [
    [[5, 1, 9], [3, 11]],
    [[2, 7], [1, 4, 6, 8]],
]
LR = 0.5
# DDPOptimizer splits the graph where a gradient bucket fills: with 4 KiB
# buckets, the head and the second block make one bucket (~4.5 KiB of
# parameters), the norm and the first block another.
BUCKET_BYTES = 4096
# Spawning, importing torch and compiling 2 x (2 forward + 2 backward)
# graphs on 2 cores takes ~1 min; a hang fails the test after this.
TIMEOUT_S = 300
# fp32 (IREE, then DDP's fp32 all-reduce) against fp64 eager. Measured: the
# gradients (1e-6 to 0.34 in size) are off by at most 4e-8 (5.5e-6
# relative on entries above 1e-3), the parameters after two steps by 9e-8,
# the losses by 1.5e-7: a few fp32 roundings through layer norm, GELU, 16-
# and 32-wide GEMMs, a mean over <= 11 rows and the loss's softmax. atol
# 1e-6 leaves a 25x margin; rtol 1e-5 covers the losses (~1). A wrong
# reduction (a rank's gradient missing, averaging unscaled losses) is off
# by the gradients' size, 1e-3 and more.
TOL = dict(rtol=1e-5, atol=1e-6)


class Model(nn.Module):
    """Pre-norm residual MLP blocks on the tokens, mean pooling, a head."""

    def __init__(self, d: int = D, classes: int = CLASSES, blocks: int = 2):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(blocks)
        )
        self.head = nn.Linear(d, classes)

    def encode(self, x):
        x = self.norm(x)
        for block in self.blocks:
            x = x + block(x)
        return x

    def forward(self, x):
        return self.head(self.encode(x).mean(dim=1))


def new_model() -> Model:
    torch.manual_seed(SEED)
    return Model()


def batch(step: int, rank: int):
    """The items ([L, D] fp32, from fp64 draws) and labels of a rank's batch."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    lengths = LENGTHS[step][rank]
    xs = [torch.randn(n, D, generator=g, dtype=torch.float64).float() for n in lengths]
    labels = torch.randint(0, CLASSES, (len(lengths),), generator=g)
    return xs, labels


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1).clone() for p in model.parameters()])


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def _worker(rank: int, port: int, out: str) -> None:
    """One rank: trains, saves what the parent checks to ``out/rank{rank}.pt``,
    or its traceback to ``out/rank{rank}.err``."""
    try:
        ddp = _train(rank, port, Path(out))  # noqa: F841  (kept alive until the exit)
    except BaseException:
        Path(out, f"rank{rank}.err").write_text(traceback.format_exc())
        os._exit(1)
    # Leave without running destructors. On torch 2.13, tearing down DDP
    # and the gloo process group (destroy_process_group, then freeing the
    # DDP module, whose Reducer then holds the group's last reference)
    # deadlocks now and then, in eager mode too: ~ProcessGroupGloo joins
    # its worker thread while holding the GIL, and that thread waits for
    # the GIL to free the last all-reduce's captured thread-local state.
    # The results are on disk and both ranks have passed a barrier.
    os._exit(0)


def _train(rank: int, port: int, out: Path):
    # Fallbacks raise in this process too (conftest sets it for the parent,
    # whose environment the spawned process inherits; set it regardless).
    os.environ["RAGGED_FALLBACK"] = "0"
    torch.set_num_threads(1)

    from torch.nn.parallel import DistributedDataParallel as DDP

    from ragged_mlir.torch import NestedTensor
    from ragged_mlir.torch import backend as rb

    assert rb.RaggedBackendOptions().fallback is False
    assert torch._dynamo.config.optimize_ddp in (True, "ddp_optimizer")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)

    model = new_model()
    compiled = torch.compile(
        model,
        backend="ragged",
        dynamic=True,
        fullgraph=True,
        options={"debug_dir": str(out / f"graphs{rank}")},
    )
    ddp = DDP(compiled, bucket_cap_mb=BUCKET_BYTES / 2**20)
    # DDPOptimizer sizes its first bucket by this constant (1 MiB) and
    # asserts that it is at most DDP's bucket size; DDP itself, given
    # bucket_cap_mb, uses bucket_cap_mb for its first bucket too. Match
    # them, so that buckets under 1 MiB (a small model's split) work.
    dist._DEFAULT_FIRST_BUCKET_BYTES = ddp.bucket_bytes_cap
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)

    result = {"initial": flat_params(model), "grads": [], "losses": [], "compiled": []}
    for step in range(len(LENGTHS)):
        xs, labels = batch(step, rank)
        total = torch.tensor([len(xs)])
        dist.all_reduce(total)
        opt.zero_grad()
        logits = ddp(NestedTensor(xs))
        # DDP averages the ranks' gradients: a sum over the rank's items
        # scaled by WORLD / total makes that the union's mean-loss gradient.
        loss = F.cross_entropy(logits, labels, reduction="sum") * (WORLD / total.item())
        loss.backward()
        result["grads"].append(flat_grads(model))
        result["losses"].append(loss.detach().clone())
        result["compiled"].append(rb.stats["compiled"])
        opt.step()
    result["final"] = flat_params(model)
    result["stats"] = dict(rb.stats)
    result["fallback_reasons"] = list(rb.fallback_reasons)
    torch.save(result, out / f"rank{rank}.pt")
    dist.barrier()
    return ddp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(out: Path) -> list[dict]:
    ctx = torch.multiprocessing.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(rank, port, str(out)), daemon=True) for rank in range(WORLD)]
    for p in procs:
        p.start()
    # Wait for both; when one fails, the other, blocked in a collective,
    # gets a few seconds to fail too before it is killed.
    deadline = time.monotonic() + TIMEOUT_S
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            deadline = min(deadline, time.monotonic() + 10)
        time.sleep(0.2)
    hung = [rank for rank, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join()
    errors = [
        f"rank {rank} (exit code {p.exitcode}):\n"
        + (
            Path(out, f"rank{rank}.err").read_text()
            if Path(out, f"rank{rank}.err").exists()
            else "no traceback\n"
        )
        for rank, p in enumerate(procs)
        if p.exitcode != 0
    ]
    if hung:
        errors.insert(0, f"ranks {hung} still running (limit {TIMEOUT_S} s, 10 s after a failure): killed")
    assert not errors, "\n".join(errors)
    return [torch.load(out / f"rank{rank}.pt") for rank in range(WORLD)]


def reference_steps():
    """Per step, the fp64 gradients (flattened) and mean loss over the union of
    the ranks' batches, each item run alone, with the same SGD steps."""
    ref = new_model().double()
    initial = flat_params(ref).float()
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    grads, losses = [], []
    for step in range(len(LENGTHS)):
        items = [batch(step, rank) for rank in range(WORLD)]
        xs = [x.double() for x_rank, _ in items for x in x_rank]
        labels = torch.cat([labels for _, labels in items])
        opt.zero_grad()
        logits = torch.stack([ref.head(ref.encode(x[None])[0].mean(0)) for x in xs])
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        grads.append(flat_grads(ref))
        losses.append(loss.detach())
        opt.step()
    return initial, grads, losses, flat_params(ref)


def graphs(debug_dir: Path, kind: str) -> list[str]:
    texts = [p.read_text() for p in debug_dir.glob("*/fx_graph.txt")]
    return [t for t in texts if t.startswith(f"# {kind} graph")]


def test_ddp_gradients_equal_the_union_batch(tmp_path):
    assert os.environ.get("RAGGED_FALLBACK") == "0"  # conftest; the workers inherit it
    results = _run_ranks(tmp_path)
    initial, want_grads, want_losses, want_final = reference_steps()

    for rank, r in enumerate(results):
        assert r["stats"]["fallbacks"] == 0 and not r["fallback_reasons"], (rank, r["fallback_reasons"])
        # Same initial parameters as the reference (same seed; DDP also
        # broadcasts rank 0's).
        torch.testing.assert_close(r["initial"], initial, rtol=0, atol=0)
        # The second step (other lengths, other batch sizes) compiled nothing.
        assert r["compiled"][0] > 0 and r["compiled"][1] == r["compiled"][0], r["compiled"]
        for step, (got, want) in enumerate(zip(r["grads"], want_grads, strict=True)):
            where = f"rank {rank} step {step}"
            torch.testing.assert_close(got.double(), want, **TOL, msg=lambda m, where=where: f"{where}: {m}")
        torch.testing.assert_close(r["final"].double(), want_final, **TOL)
    for step in range(len(LENGTHS)):
        # The ranks' scaled losses average to the union's mean loss.
        mean_loss = sum(r["losses"][step] for r in results) / WORLD
        torch.testing.assert_close(mean_loss.double(), want_losses[step], **TOL)
        # After the all-reduce, the ranks' gradients are the same bits.
        torch.testing.assert_close(results[0]["grads"][step], results[1]["grads"][step], rtol=0, atol=0)
    torch.testing.assert_close(results[0]["final"], results[1]["final"], rtol=0, atol=0)

    for rank in range(WORLD):
        debug = tmp_path / f"graphs{rank}"
        forward, backward = graphs(debug, "forward"), graphs(debug, "backward")
        # DDPOptimizer split the model at bucket boundaries (two buckets
        # here): each piece compiled as a forward and a backward graph.
        assert len(forward) >= 2 and len(backward) == len(forward), (rank, len(forward), len(backward))
        # The mean pooling's gradient is the backend's ragged broadcast.
        assert any("ragged.segment_broadcast" in g for g in backward), rank
