#!/usr/bin/env python3
"""Writes the synthetic chat trace the 1P3D benchmarks replay.

Mooncake JSONL on stdout: N requests with Poisson arrivals at RATE per
second, prompts and outputs uniform in 128-384 tokens, no shared prefixes.
Deterministic for a seed (Python's Mersenne Twister), so a figure in
benches/README.md can be reproduced from its command line:

    python3 benches/traces/chat.py 1000000 > chat-1m.jsonl

Usage: chat.py N [RATE] [SEED]   (RATE 40, SEED 7 by default)
"""
import random
import sys


def main():
    n = int(sys.argv[1])
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    r = random.Random(seed)
    t = 0.0
    out = sys.stdout
    for _ in range(n):
        t += r.expovariate(rate)
        out.write(
            '{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": []}\n'
            % (int(t * 1000), r.randint(128, 384), r.randint(128, 384))
        )


if __name__ == "__main__":
    main()
