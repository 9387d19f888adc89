"""What a rollback of a recurrent state costs: llama.cpp's snapshots against a checkpoint.

On a model with snapshots (qwen35, lfm2, nemotron_h: llama.cpp keeps one per token of the last
decode), each verification step is timed both ways, interleaved: decode the input token and k
proposals, then drop the rejected ones: by a snapshot (free: llama.cpp picks the saved state), or
by a checkpoint (the state saved before the decode, restored, the accepted tokens decoded again).
Prints ms per step for each and the checkpoint's extra cost, split into save, restore and re-decode.

    .venv/bin/python tests/bench/recurrent_rollback.py [--model qwen35-dense] [-k 4] [--accepted 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="qwen35-dense", help="a tiny model of scripts/tiny_archs.sh, or a .gguf path"
    )
    parser.add_argument("-k", type=int, default=4, help="proposals per step")
    parser.add_argument("--accepted", type=int, default=1, help="proposals kept per step (the rest are dropped)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("-t", "--threads", type=int, default=2)
    args = parser.parse_args()
    path = Path(args.model)
    if not path.suffix:
        folder = subprocess.run([str(ROOT / "scripts" / "tiny_archs.sh")], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        path = Path(folder) / f"{args.model}.gguf"

    from specdec_studio.engine.session import Session

    with Session(path, n_ctx=4096, n_threads=args.threads) as session:
        memory, batch = session.memory, session.batch
        if memory.n_snapshots < args.k:
            raise SystemExit(f"{path.name} keeps {memory.n_snapshots} snapshots: pick a model with snapshots")
        n_snapshots = memory.n_snapshots
        n_past = 0
        times = {"snapshot": [], "checkpoint": []}
        redone = 0.0
        for step in range(args.steps):
            for how in ("snapshot", "checkpoint") if step % 2 == 0 else ("checkpoint", "snapshot"):
                # the checkpoint leg: as on a model without snapshots (they are still kept, unused)
                memory.n_snapshots = n_snapshots if how == "snapshot" else 0
                t0 = time.perf_counter()
                memory.prepare_rollback(0, n_past, args.k)
                batch.clear()
                for i in range(args.k + 1):
                    batch.add(10 + (n_past + i) % 100, n_past + i, (0,), True)
                memory.decode(batch)
                t_redo = memory.t_decode_s
                memory.seq_rm(0, n_past + 1 + args.accepted, -1)
                dt = time.perf_counter() - t0
                times[how].append(dt)
                if how == "checkpoint":
                    redone += memory.t_decode_s - t_redo
                n_past += 1 + args.accepted
            if n_past > 3500:
                memory.clear()
                n_past = 0
        stats = memory.checkpoints.stats()
        saved, restored = stats["t_save_s"], stats["t_restore_s"]
        n = args.steps
        snap = statistics.median(times["snapshot"]) * 1e3
        ckpt = statistics.median(times["checkpoint"]) * 1e3
        print(
            f"{path.name}: k = {args.k}, {args.accepted} kept, "
            f"{args.k - args.accepted} dropped per step, {n} steps each"
        )
        print(f"  by snapshot   {snap:.3f} ms a step (median)")
        print(f"  by checkpoint {ckpt:.3f} ms a step ({ckpt / snap:.2f}x): save {saved / n * 1e3:.3f} ms, "
              f"restore {restored / n * 1e3:.3f} ms, re-decode {redone / n * 1e3:.3f} ms (means)")


if __name__ == "__main__":
    main()
