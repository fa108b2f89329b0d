"""The L3 verbs of ``fsmem``: ``distill`` (cold L2 units into graph.db and stablemem/) and
``graph neighbors|search``."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from fsmem.format.model import encode
from fsmem.graph.distill import Distiller, LLMDistiller, RuleDistiller
from fsmem.graph.graph import Graph, Recall
from fsmem.interfaces.cli.args import nonneg_float, nonneg_int, positive_float, positive_int
from fsmem.interfaces.cli.progress import progress
from fsmem.memory.facade import Memory
from fsmem.memory.reader import Reader

__all__ = ["add_cli", "cmd_distill", "cmd_graph"]


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(encode(data).decode() + "\n")
    elif text:
        print(text)


def _fmt(rec: Recall) -> list[str]:
    return [f"{r.source_name} -[{r.relation_type}]-> {r.target_name}  ({r.confidence:.2f})"
            + "".join(f"  from {p.unit_id or '?'}/{p.event_id or '?'}" if p.unit_id or not p.text
                      else f"  from 「{p.text[:60]}」" for p in r.provenance)
            for r in rec.relations]


def cmd_distill(args: argparse.Namespace) -> int:
    distiller: Distiller = RuleDistiller() if args.distiller == "rules" else LLMDistiller(
        base_url=args.llm_base_url or "", model=args.llm_model or "", timeout=args.llm_timeout)
    with progress("distill", enabled=not args.json) as tick:
        report = Memory.open(args.root, create=False,
                             agent=getattr(args, "agent", None)).distill(
            max_age_s=args.max_age * 3600, max_access=args.max_access, distiller=distiller,
            dry_run=args.dry_run, progress=tick)
    done = len(report.units) - len(report.no_facts) if report.dry_run else len(report.distilled)
    lines = [f"{'would distil' if report.dry_run else 'distilled'} {done} of {report.cold} cold "
             f"unit(s): {report.triples} triple(s), +{report.blocks_added} block(s), "
             f"+{report.edges_added} edge(s)"]
    if report.no_facts:
        lines.append(f"{len(report.no_facts)} cold unit(s) gave no triple and stay in documents/")
    if report.error:   # what was distilled is stored; the rest waits for the next run
        lines.append(f"stopped early (run distill again for the rest): {report.error}")
    lines += [f"  {u.unit_id}: {t.subject} -[{t.relation}]-> {t.object}"
              for u in report.units if report.dry_run for t in u.triples]
    _emit(args, report, "\n".join(lines))
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    with Graph(Reader.open(args.root)) as graph:
        if args.graph_verb == "neighbors":
            rec = graph.neighbors(args.name, depth=args.depth)
            text = "\n".join(_fmt(rec)) or f"no relation within {args.depth} hop(s) of {args.name!r}"
        else:
            rec = graph.search(args.text, limit=args.limit)
            text = "\n".join([f"{e.name} [{e.type}] {e.block_id}" for e in rec.entities]
                             + _fmt(rec)) or "no match"
    _emit(args, rec, text)
    return 0


def add_cli(subparsers: Any, common_parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``distill`` and ``graph neighbors|search`` on the ``fsmem`` command."""
    parents = list(common_parents)
    sp = subparsers.add_parser("distill", parents=parents, help="distil cold L2 units into L3",
                               description="distil cold L2 units into graph.db and move them, "
                               "whole, into stablemem/")
    sp.add_argument("--max-age", type=nonneg_float, default=72.0, metavar="HOURS",
                    help="cold when the last access (else creation) is this old (default 72)")
    sp.add_argument("--max-access", type=nonneg_int, default=2, metavar="N",
                    help="cold when accessed at most this many times (default 2)")
    sp.add_argument("--dry-run", action="store_true", help="show the triples; change nothing")
    sp.add_argument("--distiller", choices=["rules", "llm"], default="rules",
                    help="rules: offline patterns (default); llm: an OpenAI-compatible model")
    sp.add_argument("--llm-base-url", help="OpenAI-compatible base URL (or FSMEM_LLM_BASE_URL)")
    sp.add_argument("--llm-model", help="model (or FSMEM_LLM_MODEL); key from FSMEM_LLM_API_KEY")
    sp.add_argument("--llm-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                    help="per request to the model (default 60)")
    sp.set_defaults(fn=cmd_distill)
    text = "query the L3 graph (graph.db): relations around an entity, or a text search"
    gp = subparsers.add_parser("graph", parents=parents, help=text, description=text)
    gsub = gp.add_subparsers(dest="graph_verb", required=True, metavar="VERB")
    text = "the relations around an entity, up to --depth hops away"
    np_ = gsub.add_parser("neighbors", parents=parents, help=text, description=text)
    np_.add_argument("name", metavar="NAME", help="the entity's name")
    np_.add_argument("--depth", type=positive_int, default=2, metavar="N",
                     help="hops to follow (default 2)")
    np_.set_defaults(fn=cmd_graph)
    text = "entities and relations whose names match a text"
    sp2 = gsub.add_parser("search", parents=parents, help=text, description=text)
    sp2.add_argument("text", metavar="TEXT", help="what to search for")
    sp2.add_argument("--limit", type=positive_int, default=20, metavar="N",
                     help="at most N entities (default 20)")
    sp2.set_defaults(fn=cmd_graph)
