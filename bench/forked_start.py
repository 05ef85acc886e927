"""What the test suite's zygote saves per process: one ``onward run`` started as
``python -m onward`` vs forked from ``tests/support/zygote.py`` (imports done once, before).

Both run the same command in the same way: a 3-file copy plan (``copy every file in
inbox/ to archive/``), a fresh SQLite store per run at onward's defaults (WAL,
``synchronous=NORMAL``), the test suite's environment (``tests.support.common.cli_env``), stdout
and stderr captured. Rounds alternate real, forked, real, ...; the wall time of each
command is measured from the test process (start to exit status), and the medians and the
ratio real ÷ forked are printed. Not a product target (``run_all.py`` does not run it):
it explains where the suite's time went.

    python bench/forked_start.py --rounds 10
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import zygote  # noqa: E402
from tests.support.common import cli_env, onward_cmd  # noqa: E402


def workdir(base: Path, n: int) -> tuple[Path, list[str]]:
    wd = base / f"r{n}"
    (wd / "inbox").mkdir(parents=True)
    for i in range(3):
        (wd / "inbox" / f"f{i}.txt").write_text(f"file {i}\n")
    args = ["run", "copy every file in inbox/ to archive/", "--db", f"sqlite:///{wd}/o.db"]
    return wd, [*args, "--json"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    opts = parser.parse_args()
    real: list[float] = []
    forked: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        t = time.perf_counter()
        zygote.run(["--help"], cwd=base, env=cli_env(), timeout=120)  # start the zygote
        zygote_start = time.perf_counter() - t
        for n in range(opts.rounds):
            for kind, times in (("real", real), ("forked", forked)):
                wd, args = workdir(base / kind, n)
                t = time.perf_counter()
                if kind == "real":
                    proc = subprocess.run(
                        onward_cmd(*args), cwd=wd, env=cli_env(), capture_output=True, text=True
                    )
                else:
                    proc = zygote.run(args, cwd=wd, env=cli_env(), timeout=120)
                times.append(time.perf_counter() - t)
                assert proc.returncode == 0, proc.stderr
                assert len(list((wd / "archive").iterdir())) == 3
    r, f = statistics.median(real), statistics.median(forked)
    print(f"onward run (3-file copy, SQLite), {opts.rounds} rounds each, interleaved")
    print(f"  zygote start (once per test worker): {zygote_start:.2f} s")
    print(f"  python -m onward: median {r:.3f} s  (min {min(real):.3f}, max {max(real):.3f})")
    print(f"  forked:           median {f:.3f} s  (min {min(forked):.3f}, max {max(forked):.3f})")
    print(f"  real / forked: {r / f:.1f}x")


if __name__ == "__main__":
    main()
