#!/usr/bin/env python3
"""Float64 transformers reference for a model shipped in the repository.

Writes tests/fixtures/NAME/ with reference.json (format of docs/fixtures.md)
whose "model" field points at the model folder (relative to the repository
root) instead of holding a copy of its weights, and logits_K.bin.

    python3 tools/make_model_reference.py --model models/demo-moe --name demo_moe

Prompts are real sentences tokenized with the model's own tokenizer.json;
a prompt is kept only when its routing has no near-tie (top-k gap) and its
greedy path has no near-tie between the two best tokens.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import RouteWatch, forward_logits, greedy, load_reference  # noqa: E402

PROMPTS = [
    "The state of the Union is",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse,",
    "Fellow-citizens of the Senate and of the House of Representatives:",
    "The whale, the sea and the ship were",
    "We have the duty to our people and to the world to",
    "It was a cold morning when the captain",
    "The Congress shall have power to lay and collect taxes",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model folder, relative to the repository root")
    ap.add_argument("--name", required=True, help="fixture folder name under --out")
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--min-gap", type=float, default=1e-5, help="smallest relative router top-k gap accepted")
    ap.add_argument("--min-margin", type=float, default=5e-3, help="smallest greedy top-2 logit margin accepted")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 4)
    model = load_reference(args.model)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    out = os.path.join(args.out, args.name)
    os.makedirs(out, exist_ok=True)
    seqs, greedys, kept_gap = [], [], 1.0
    for text in PROMPTS:
        ids = tok.encode(text).ids
        watch = RouteWatch(model)
        logits = forward_logits(model, ids)
        gen, margin = greedy(model, ids, 8)
        watch.close()
        print(f"{text[:40]!r}: {len(ids)} tokens, route gap {watch.min_gap:.2e}, greedy margin {margin:.2e}", flush=True)
        if watch.min_gap < args.min_gap or margin < args.min_margin:
            continue
        kept_gap = min(kept_gap, watch.min_gap)
        if len(seqs) < 2:
            k = len(seqs)
            logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, f"logits_{k}.bin"))
            seqs.append({"tokens": ids, "logits": f"logits_{k}.bin"})
        if len(greedys) < 2:
            greedys.append({"prompt": ids, "generated": gen, "min_margin": margin})
        if len(seqs) == 2 and len(greedys) == 2:
            break
    if len(seqs) < 2:
        raise SystemExit("fewer than two prompts passed the tie checks")
    ref = {
        "arch": json.load(open(os.path.join(args.model, "config.json")))["model_type"],
        "encoding": "bf16",
        "model": args.model,
        "generator": "tools/make_model_reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "sequences": seqs,
        "greedy": greedys,
        "min_route_gap": kept_gap,
        "tolerance": 1e-3,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
