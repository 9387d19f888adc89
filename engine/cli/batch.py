"""``specdec batch``: many prompts of a JSON-lines file decoded together in one context."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.cli.common import add_run_args, ctrl_c_stops, read_text_file, run_setup, session_from_args


def cmd_batch(args: argparse.Namespace) -> int:
    """Decode every prompt of a JSON-lines file, ``--parallel`` at a time in one context."""
    from specdec_studio.engine import parallel

    if not args.file:
        raise SpecDecError("batch needs its prompts: -f FILE.jsonl, one {\"id\": …, \"prompt\": …} per line")
    if args.prompt is not None:
        raise SpecDecError("batch reads its prompts from -f FILE.jsonl; -p is for `specdec run`")
    records = _read_batch_file(Path(args.file))
    config, model_path, draft_path = run_setup(args)
    with (
        ctrl_c_stops() as stop,
        session_from_args(args, model_path, draft_path, stop) as session,
    ):
        jobs = []
        for record in records:
            text = str(record["prompt"])
            tokens = session.chat_tokens([("user", text)]) if args.chat and session.has_chat_template \
                else session.tokenize_prompt(text)
            limit = record.get("max_tokens")
            jobs.append(parallel.BatchJob(str(record["id"]), tuple(tokens), int(limit) if limit else None))
        results: dict[str, dict] = {}
        summary = None
        for event in parallel.run_batch(session, config, jobs, args.parallel):
            if isinstance(event, parallel.JobFinished):
                results[event.job_id] = {"id": event.job_id, "text": event.text, "token_ids": list(event.token_ids),
                                         "finish_reason": event.finish_reason, "stats": event.stats}
                if not args.json:
                    print(f"[{len(results)}/{len(jobs)}] {event.job_id}: {len(event.token_ids)} tokens, "
                          f"{event.finish_reason}", file=sys.stderr)
            elif isinstance(event, parallel.BatchFinished):
                summary = event.stats
    lines = "".join(json.dumps(results[str(r["id"])], ensure_ascii=False) + "\n" for r in records)
    if args.output:
        from specdec_studio.engine.jsonfile import write_text

        write_text(Path(args.output), lines, shared=True)
    else:
        sys.stdout.write(lines)
    s = summary or {}
    print(f"{len(jobs)} prompts, {args.parallel} at a time: {s.get('n_predict', 0)} tokens in "
          f"{s.get('t_total_s', 0.0):.2f} s = {s.get('tokens_per_second', 0.0):.1f} tokens/s together "
          f"({s.get('steps', 0)} steps, {s.get('mean_batch_tokens', 0.0):.2f} tokens a batch)", file=sys.stderr)
    return 1 if stop.is_set() else 0


def _read_batch_file(path: Path) -> list[dict]:
    records, seen = [], set()
    for number, line in enumerate(read_text_file(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecDecError(f"{path.name} line {number} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "prompt" not in record or "id" not in record:
            raise SpecDecError(f"{path.name} line {number} needs an \"id\" and a \"prompt\"")
        if str(record["id"]) in seen:
            raise SpecDecError(f"{path.name} line {number}: the id {record['id']!r} is used twice")
        seen.add(str(record["id"]))
        records.append(record)
    if not records:
        raise SpecDecError(f"{path.name} has no prompts")
    return records


def add_parser(sub) -> None:
    """``batch``: the run flags, the parallel slots and the output file."""
    bt = sub.add_parser("batch", help="decode many prompts (a JSON-lines file) together in one context")
    add_run_args(bt)
    bt.add_argument("--parallel", "-np", type=int, default=4, help="prompts decoded at once (sequences)")
    bt.add_argument("-o", "--output", default=None, help="write the results here (JSON lines); default stdout")
    bt.set_defaults(handler=cmd_batch)
