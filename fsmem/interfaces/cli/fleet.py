"""``fsmem fleet sync|search|status|drop``: the fleet index in PostgreSQL (fsmem.fleet,
docs/FLEET.md). ``--dsn`` (or ``FSMEM_FLEET_DSN``) names the database."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Sequence

from fsmem.fleet import FleetIndex, SyncReport
from fsmem.fleet.schema import FleetError
from fsmem.format.model import encode
from fsmem.interfaces.cli.args import nonneg_int, positive_float, positive_int

__all__ = ["add_cli", "cmd_fleet"]

log = logging.getLogger("fsmem.fleet")


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(encode(data).decode() + "\n")
    elif text:
        print(text)
    sys.stdout.flush()


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get("FSMEM_FLEET_DSN", "")
    if not dsn:
        raise FleetError("--dsn: not given (nor FSMEM_FLEET_DSN): "
                         "e.g. --dsn postgresql://USER@HOST:5432/DB")
    return dsn


def _report_text(report: SyncReport) -> str:
    lines = []
    for s in report.stores:
        if s.mode == "error":
            lines.append(f"{s.path}: skipped: {s.reason}")
            continue
        how = s.mode + (f" ({s.reason})" if s.reason else "")
        lines.append(f"{s.path} [{s.store_id}]: {how}: {s.records} record(s), "
                     f"+{s.upserted} upserted, -{s.deleted} deleted, {s.unchanged} unchanged"
                     + (f", {s.unreadable} unreadable" if s.unreadable else "")
                     + f"; at {s.pos}")
    return "\n".join(lines)


def _sync(args: argparse.Namespace, idx: FleetIndex) -> int:
    if not args.follow:
        report = idx.sync(args.stores)
        _emit(args, report.stores, _report_text(report))
        return 1 if report.errors else 0

    def told(report: SyncReport | None, error: Exception | None) -> None:
        if report is not None:
            _emit(args, report.stores, _report_text(report))
        else:
            print(f"fsmem fleet sync: round failed, retried: {error}", file=sys.stderr)
    idx.follow(args.stores, interval=args.interval, on_round=told)
    return 0


def _search(args: argparse.Namespace, idx: FleetIndex) -> int:
    hits = idx.search(args.text, agent=args.agent, store=args.store, layer=args.layer,
                      limit=args.limit)
    lines = [f"{h.score:7.4f}  {h.store_id}  {h.unit_id}  {h.layer}  agent={h.agent}"
             + ("  private" if h.private else "") + f"\n         {h.store_path}"
             + (f"\n         {h.summary or h.snippet}" if h.summary or h.snippet else "")
             for h in hits]
    _emit(args, hits, "\n".join(lines) or "no match")
    return 0


def _status(args: argparse.Namespace, idx: FleetIndex) -> int:
    rows = idx.stores()
    lines = [f"{r['store_id']}  {r['path']}  units={r['units']}  feed={r['feed'][:8]}:"
             f"{r['pos']}  synced {r['synced_at'] or '-'}"
             + (f"  error: {r['error']}" if r["error"] else "") for r in rows]
    _emit(args, rows, "\n".join(lines) or "no store in the fleet index")
    return 0


def cmd_fleet(args: argparse.Namespace) -> int:
    with FleetIndex(_dsn(args), partitions=getattr(args, "partitions", 0)) as idx:
        if args.fleet_verb == "sync":
            return _sync(args, idx)
        if args.fleet_verb == "search":
            return _search(args, idx)
        if args.fleet_verb == "status":
            return _status(args, idx)
        idx.drop()
        _emit(args, {"dropped": True}, "fleet tables dropped (the stores are untouched)")
        return 0


def add_cli(subparsers: Any, common_parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``fleet sync|search|status|drop`` on the ``fsmem`` command."""
    parents = list(common_parents)
    dsn = argparse.ArgumentParser(add_help=False)
    dsn.add_argument("--dsn", default=None, metavar="DSN",
                     help="the fleet database, postgresql://USER@HOST:PORT/DB "
                     "(default: $FSMEM_FLEET_DSN)")
    fp = subparsers.add_parser("fleet", parents=parents, help="search many stores as one "
                               "(a PostgreSQL index fed from their change feeds)",
                               description="the fleet index (docs/FLEET.md)")
    fsub = fp.add_subparsers(dest="fleet_verb", required=True, metavar="VERB")

    def verb(name: str, text: str) -> argparse.ArgumentParser:
        return fsub.add_parser(name, parents=[*parents, dsn], help=text, description=text)
    sp = verb("sync", "bring the index in step "
                         "with each store (read as a reader: nothing written there)")
    sp.add_argument("stores", nargs="+", metavar="STORE", help="store directories")
    sp.add_argument("--follow", action="store_true", help="keep syncing every --interval")
    sp.add_argument("--interval", type=positive_float, default=5.0, metavar="S",
                    help="with --follow: seconds between rounds (default 5)")
    sp.add_argument("--partitions", type=nonneg_int, default=0, metavar="N",
                    help="hash partitions by store when the tables are created")
    sp.set_defaults(fn=cmd_fleet)
    sp = verb("search", "search every store (with "
                         "--agent A: what agent A may see, shared units and its own private "
                         "ones; without: everything, the operator's view)")
    sp.add_argument("text", metavar="TEXT", help="what to search for")
    sp.add_argument("--store", metavar="ID", help="only this store (its id or its path)")
    sp.add_argument("--layer", metavar="L", help="only this layer (context, context@<agent>, "
                    "documents, stablemem)")
    sp.add_argument("--limit", type=positive_int, default=10, metavar="N",
                    help="at most N hits (default 10)")
    sp.set_defaults(fn=cmd_fleet)
    sp = verb("status", "the stores the index holds")
    sp.set_defaults(fn=cmd_fleet)
    sp = verb("drop", "drop the fleet tables "
                         "(derived: a sync builds them again)")
    sp.set_defaults(fn=cmd_fleet)
