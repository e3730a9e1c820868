#!/usr/bin/env python3
"""MTP acceptance per draft position, and decode speed with and without MTP, on a corpus's held-out files.

Usage: heldout_acceptance.py MTP_BINARY MODEL MANIFEST CORPUS_DIR [--temp T] [--draft-max D] [-n N]
                             [--prompt-bytes B] [--seed S]

MANIFEST is the TSV `mtp-train --manifest` writes; every file marked `heldout` under CORPUS_DIR gives one
prompt: its first B bytes, cut back to the last newline. For each prompt this runs `mtp run` with `--spec mtp`
and then with `--spec none` (same prompt, same seed, N tokens, --ignore-eos, one thread), and adds up the
`statistics draft-mtp` counts: verification rounds (accepted / (mean acc len - 1), or drafted / D when nothing
was accepted), accepted tokens, and for each position the rounds that accepted at least that many drafts.
Prints the acceptance per position (of all rounds, and given the previous position was accepted), the mean
acceptance length, and each mode's generation tokens/s (tokens over summed generation time).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

STATS = re.compile(r"#gen tokens = (\d+), #acc tokens = (\d+), #mean acc len = ([\d.]+), #acc rate/pos = \(([^)]*)\)")
GEN = re.compile(r"generation: (\d+) tokens in ([\d.]+) s")


def held_out_files(manifest):
    rows = [line.split("\t") for line in Path(manifest).read_text().splitlines()[1:] if line]
    return [r[0] for r in rows if len(r) == 4 and r[3] == "heldout"]


def prompt_of(path, n_bytes):
    data = Path(path).read_bytes()[:n_bytes]
    cut = data.rfind(b"\n")
    return data[: cut + 1 if cut > 0 else len(data)].decode("utf-8", errors="ignore")


def run(binary, model, prompt, spec, a):
    cmd = [binary, "run", "-m", model, "-p", prompt, "-n", str(a.n), "--ignore-eos", "-t", "1",
           "--temp", str(a.temp), "--seed", str(a.seed), "--spec", spec]
    if spec == "mtp":
        cmd += ["--draft-max", str(a.draft_max)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"heldout_acceptance: {' '.join(cmd[:4])}...: {r.stderr.strip()}")
    gen = GEN.search(r.stderr)
    return r.stdout, int(gen.group(1)), float(gen.group(2)), STATS.search(r.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("binary")
    p.add_argument("model")
    p.add_argument("manifest")
    p.add_argument("corpus_dir")
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--draft-max", type=int, default=3)
    p.add_argument("-n", type=int, default=128)
    p.add_argument("--prompt-bytes", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    files = held_out_files(a.manifest)
    if not files:
        sys.exit(f"heldout_acceptance: {a.manifest}: no held-out file")
    rounds = accepted = drafted = 0
    at_least = [0.0] * a.draft_max
    time = {"mtp": [0, 0.0], "none": [0, 0.0]}
    for name in files:
        prompt = prompt_of(Path(a.corpus_dir) / name, a.prompt_bytes)
        for spec in ("mtp", "none"):
            _, n, seconds, stats = run(a.binary, a.model, prompt, spec, a)
            time[spec][0] += n
            time[spec][1] += seconds
            if spec != "mtp" or stats is None:
                continue
            d, acc, mean_len = int(stats.group(1)), int(stats.group(2)), float(stats.group(3))
            rates = [float(x) for x in stats.group(4).split(",") if x.strip()]
            r = round(acc / (mean_len - 1)) if acc > 0 else -(-d // a.draft_max)
            rounds += r
            accepted += acc
            drafted += d
            for i, rate in enumerate(rates[: a.draft_max]):
                at_least[i] += rate * r
    print(f"{len(files)} held-out files, {a.n} tokens each, temp {a.temp}, draft-max {a.draft_max}: "
          f"{rounds} rounds, {drafted} drafted, {accepted} accepted, mean acc len {1 + accepted / max(rounds, 1):.3f}")
    prev = rounds
    for i, k in enumerate(at_least):
        given = k / prev if prev else 0.0
        print(f"position {i + 1}: accepted in {k / max(rounds, 1):.3f} of rounds, {given:.3f} given position {i}")
        prev = k
    for spec in ("none", "mtp"):
        n, s = time[spec]
        print(f"--spec {spec}: {n} tokens in {s:.3f} s of generation, {n / s:.1f} tok/s")
    print(f"speedup {time['mtp'][0] / time['mtp'][1] / (time['none'][0] / time['none'][1]):.3f}x")


if __name__ == "__main__":
    main()
