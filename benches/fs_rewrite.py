"""Times writing 4,096 report-page-sized files (37 KB) into one folder from
two threads, after the folder's previous files were removed or kept: why
`actdiff compare` writes a previous report's result pages over in place
(docs/performance.md, "A report written over the previous one").

    python3 benches/fs_rewrite.py DIR fresh    # DIR removed, then written
    python3 benches/fs_rewrite.py DIR unlink   # the 4,096 files removed, then written
    python3 benches/fs_rewrite.py DIR keep     # written over in place
    python3 benches/fs_rewrite.py DIR trunc    # truncated to 0 first, then written

Run `fresh` first; run it under `/usr/bin/time` for the system time.
"""

import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

FILES = 4096
DATA = b"x" * 37000


def main() -> None:
    folder, mode = sys.argv[1], sys.argv[2]
    name = lambda i: os.path.join(folder, f"rank{i}-page1.html")  # noqa: E731
    if mode == "fresh":
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    elif mode == "unlink":
        for i in range(FILES):
            os.unlink(name(i))
    elif mode == "trunc":
        for i in range(FILES):
            os.truncate(name(i), 0)
    elif mode != "keep":
        sys.exit(f"unknown mode {mode!r}: fresh, unlink, keep or trunc")

    def write(i: int) -> None:
        with open(name(i), "wb") as f:
            f.write(DATA)

    t = time.perf_counter()
    with ThreadPoolExecutor(2) as ex:
        list(ex.map(write, range(FILES)))
    print(f"{mode}: {FILES} files written in {time.perf_counter() - t:.3f} s")


if __name__ == "__main__":
    main()
