"""The trainer across processes: torch.distributed with FSDP2 (`fully_shard`), the experts
sharded across ranks.

    torchrun --nproc-per-node 2 -m training.rl --preset ...       # gloo on CPUs, NCCL on GPUs
    group = init_from_env()                                      # None when not under torchrun
    shard_model(model)                                           # before the Trainer is built
    end_rank(group)                                              # the end of a rank's run (never returns)

Sharding: every decoder block is its own FSDP unit, then the root (embedding, head). FSDP2
shards each parameter along dim 0; the experts' stacked weights are (E, ., .), so dim 0 is the
expert: with E divisible by the world size each rank stores, reduces gradients for and keeps
the optimizer state of E / world whole experts (`shard_model` checks it). The forward gathers
one block's weights at a time. (Expert parallelism proper, routing tokens to the rank that holds
their expert with all-to-all, is not implemented: on these sizes the gather is cheaper.)

Each rank trains every world-th sample of the batch (training/batch.py `shard`), the loss's token
counts summed over ranks first and the loss multiplied by the world size before backward (FSDP
averages the ranks' gradients; gloo has no pre-scaled sum), so the gradient equals one process's on
the whole batch; ranks run equally many micro-batches. Rank 0 runs the rollouts and sends each
update's groups to the others (`broadcast_groups`).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch
import torch.distributed as dist

from training.buffer import Group


def init_from_env() -> dist.ProcessGroup | None:
    """Joins the process group torchrun describes (WORLD_SIZE > 1), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend)
    return dist.group.WORLD


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2 over the blocks and the root, on the current process group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    experts = model.config.num_experts
    if experts > 1 and experts % world:
        raise ValueError(f"{experts} experts cannot be sharded evenly across {world} ranks")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (world,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def end_rank(group: dist.ProcessGroup) -> NoReturn:
    """Ends a torchrun rank once its run is written: a barrier (no rank exits while another is
    still writing), the process group destroyed, stdio flushed, then `os._exit(0)` without the
    interpreter's finalization. Gloo's worker threads outlive `destroy_process_group`, and one
    still releasing a finished collective's tensors needs the GIL; during finalization that
    thread is killed inside a C++ destructor and the rank aborts ("terminate called without an
    active exception", SIGABRT; the core's stack: `ProcessGroupGloo::runLoop` ->
    `~AsyncBarrierWork` -> `~AsyncAllgatherCoalescedWork` -> `decref_pyobject` -> `take_gil`),
    and torchrun then kills the other ranks. tests/training/test_distributed.py's two-rank run
    aborted so in 5 of 52 runs on 2 vCPUs, 3 of 62 with the barrier alone."""
    dist.barrier(group)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def broadcast_groups(groups: list[Group] | None, group: dist.ProcessGroup | None) -> list[Group] | None:
    """Rank 0's groups (None: the run is over) on every rank, pickled through the process group;
    without one, `groups` as they are."""
    if group is None:
        return groups
    box = [groups if dist.get_rank(group) == 0 else None]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]
