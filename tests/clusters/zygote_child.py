"""A program for tests/clusters/test_zygote.py to run as a worker: prints its network
namespace's inode, a random number and its argv, then exits with argv[0] as its code after
sleeping argv[1] seconds (`main(argv)`, what a zygote forks)."""

from __future__ import annotations

import os
import random
import sys
import time


def main(argv: list[str]) -> int:
    print(os.stat("/proc/self/ns/net").st_ino, random.random(), *argv, flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    time.sleep(float(argv[1]))
    return int(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
