#!/usr/bin/env python3
"""Where the edge's heap allocations come from: reads `perf script -F ip,sym`
of malloc uprobe samples with call chains (`bench/allocs.sh` with
ALLOCS_SITES=1) on stdin and prints each library's share of the samples,
then the share of the nearest frame of Ithaca's own code. perf drops
samples when its buffer fills, so these are shares; the exact count per
call is what `bench/allocs.sh` prints.

    perf script -F ip,sym -i perf.data | bench/alloc_sites.py
"""
import collections
import sys

# Checked in order: the first library found anywhere in the chain names it.
LIBRARIES = [
    ("gRPC client (tonic, h2)", ("tonic::", "h2::", "hyper::proto::h2")),
    ("rmcp (MCP model and HTTP service)", ("rmcp::",)),
    ("HTTP/1 server (hyper)", ("hyper::proto::h1",)),
    ("Ithaca's own code", ("ithaca",)),
]


def main():
    by_library = collections.Counter()
    by_frame = collections.Counter()
    samples = 0
    for block in sys.stdin.read().split("\n\n"):
        frames = []
        for line in block.strip().splitlines()[1:]:
            parts = line.strip().split(" ", 1)
            if len(parts) == 2 and parts[1] != "[unknown]":
                frames.append(parts[1])
        if not frames:
            continue
        samples += 1
        chain = "\n".join(frames)
        library = next(
            (name for name, needles in LIBRARIES if any(n in chain for n in needles)),
            "other (tokio, axum, std)",
        )
        by_library[library] += 1
        nearest = next((f for f in frames if "ithaca" in f), None)
        if nearest:
            by_frame[nearest[:100]] += 1
    if not samples:
        sys.exit("alloc sites: no samples (is perf's uprobe on malloc there?)")
    print(f"alloc sites: {samples} mallocs sampled, by the library that asked")
    for name, count in by_library.most_common():
        print(f"  {100 * count / samples:5.1f} %  {name}")
    print("alloc sites: by the nearest frame of Ithaca's code (top 15)")
    for frame, count in by_frame.most_common(15):
        print(f"  {100 * count / samples:5.1f} %  {frame}")


if __name__ == "__main__":
    main()
