"""Open time and peak RSS of `golden-lens gguf info` beside gguf-py's GGUFReader on the same
file, measured in one run (each in its own child process; peak RSS from wait4's ru_maxrss).

usage: open_bench.py GOLDEN_LENS_BIN FILE.gguf [PYTHON]
PYTHON (default: this interpreter) must import gguf==0.19.0.
"""

import os
import subprocess
import sys
import time


def measure(argv):
    """Runs argv with stdout discarded; returns (wall seconds, peak RSS in MiB, exit code)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(f"{argv[0]} exited {code}: {stderr}\n")
    return wall, usage.ru_maxrss / 1024.0, code


READER = """
import sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
print(len(r.tensors), len(r.fields))
"""


def main() -> None:
    binary, path = sys.argv[1], sys.argv[2]
    python = sys.argv[3] if len(sys.argv) > 3 else sys.executable
    size = os.stat(path).st_size
    used = os.stat(path).st_blocks * 512
    print(f"file: {path}: {size:,} bytes logical, {used:,} bytes on disk")
    rows = [
        ("golden-lens gguf info", [binary, "gguf", "info", path]),
        ("golden-lens gguf info --json", [binary, "gguf", "info", path, "--json"]),
        ("gguf-py GGUFReader", [python, "-c", READER, path]),
    ]
    print(f"{'tool':<30} {'open s':>8} {'peak RSS MiB':>13}")
    for name, argv in rows:
        wall, rss, code = measure(argv)
        status = "" if code == 0 else f"  (exit {code})"
        print(f"{name:<30} {wall:>8.3f} {rss:>13.1f}{status}")


if __name__ == "__main__":
    main()
