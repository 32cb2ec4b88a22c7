"""How fast fdatasync is after a small write, by how the file was preallocated.

    python tests/store/fsync_modes.py fallocate zeros sparse [DIR]

fallocate: posix_fallocate (unwritten extents); zeros: real zeros written
first; sparse: ftruncate. Not a test: a measurement behind docs/journal.md
("Preallocation"), which is why the journal writes zeros ahead of its data.
"""

import os
import sys
import tempfile
import time


def run(mode: str, directory: str, n: int = 1500) -> None:
    p = os.path.join(directory, "fsync-mode-test")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        if mode == "fallocate":
            os.posix_fallocate(fd, 0, 64 << 20)
        elif mode == "zeros":
            z = bytes(1 << 20)
            for i in range(64):
                os.pwrite(fd, z, i << 20)
            os.fsync(fd)
        elif mode == "sparse":
            os.ftruncate(fd, 64 << 20)
        else:
            raise SystemExit(f"unknown mode {mode!r}: fallocate, zeros or sparse")
        t = time.perf_counter()
        c0 = time.process_time()
        for i in range(n):
            os.pwrite(fd, b"x" * 300, i * 304)
            os.fdatasync(fd)
        dt = time.perf_counter() - t
        cpu = (time.process_time() - c0) / n * 1e6
        print(f"{mode:10s} {n / dt:6.0f} fdatasync/s  cpu {cpu:4.0f} us each", flush=True)
    finally:
        os.close(fd)
        os.unlink(p)


if __name__ == "__main__":
    args = sys.argv[1:] or ["fallocate", "zeros", "sparse"]
    directory = args.pop() if args and os.path.isdir(args[-1]) else tempfile.gettempdir()
    for m in args:
        run(m, directory)
