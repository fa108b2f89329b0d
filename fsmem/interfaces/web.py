"""``fsmem serve``: a read-only web view of one store, on the standard library's HTTP server.

Why: the L1/L2/L3 flow, the images and the graph of a store are otherwise only text. What:
plain HTML pages (no script, nothing from another origin) built from one lock-free
``Reader``: the overview with the model's view, the L1 timeline, each layer paginated, a unit
with its events and images, a block's bytes, the graph around an entity, one search over every
layer, and the change feed. How it stays read-only and fast: the Reader takes no lock and
writes nothing (searches pass ``count=False``: no access-log line); unit manifests are cached
by path (a published unit never changes), so a layer page reads only the 50 manifests it
shows; the change feed is followed from where the last page left it (``read_changes`` with a
hint); graph.db is reopened when its files change (a reader's connection may be immutable).
Every page takes a fresh listing, so what another process writes shows on the next load.

``WebView.get(target)`` builds a response without any socket (tests, benchmarks);
``make_server`` wraps it in a ``ThreadingHTTPServer`` that answers GET and HEAD only, refuses a
Host header other than the loopback names (DNS rebinding) unless told which host it serves,
and sends a Content-Security-Policy that allows nothing but this origin's images and styles.
"""

from __future__ import annotations

import errno
import html
import logging
import os
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from fsmem.format.blocks import DIGEST_RE, read_block
from fsmem.format.errors import FsmemError, NotFound
from fsmem.format.layout import NotAStore, Vanished, valid_layer
from fsmem.format.model import NAME_RE, BlockRef, Event, Manifest
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import block_path, read_manifest
from fsmem.format.views import hydrate_event, summary_label, unit_label
from fsmem.homeagent.documents import legacy_doc_files, legacy_file_of, legacy_id
from fsmem.memory.reader import Reader
from fsmem.store.changes import (
    MARKS,
    Change,
    ChangesTruncated,
    dir_stamp,
    feed_stamp,
    read_changes,
)

__all__ = ["WebView", "Response", "BadRequest", "make_server", "url_of", "open_reader",
           "LOCAL_HOSTS", "CSP", "PAGE_SIZE"]

log = logging.getLogger("fsmem.web")

PAGE_SIZE = 50
RECENT = 20                    # changes on the overview
FEED_KEPT = 60_000             # change records kept in memory (the feed keeps ~56,000)
MANIFESTS_KEPT = 200_000       # cached manifests before the cache starts again
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
CSP = ("default-src 'none'; img-src 'self'; style-src 'self' 'unsafe-inline'; "
       "form-action 'self'")
SECURITY_HEADERS = (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                    ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store"))
#: media types a block is served as (the manifest's); anything else is a download
INLINE_MEDIA = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp",
                "audio/", "video/", "application/pdf")
HTML_TYPE = "text/html; charset=utf-8"

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#24313f;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;
 align-items:center;flex-wrap:wrap}
header a{color:#dce7f3;text-decoration:none}header a:hover{text-decoration:underline}
header b{font-size:1.1em}header form{margin-left:auto}
main{padding:1em 1.4em;max-width:1100px}
h1{font-size:1.35em;margin:.3em 0 .6em}h2{font-size:1.1em;margin:1.3em 0 .4em}
table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #e3e6ea;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
pre,.text{white-space:pre-wrap;word-break:break-word;background:#fff;border:1px solid #e3e6ea;
 padding:.5em .7em;margin:.3em 0;font:13px/1.4 ui-monospace,monospace}
.ev{background:#fff;border:1px solid #dfe3e8;border-radius:4px;padding:.5em .8em;margin:.6em 0}
.meta{color:#5b6672;font-size:.88em}.tag{background:#e6eef7;border-radius:3px;padding:0 .35em}
.l-context{color:#1a7f37}.l-documents{color:#0b5cad}.l-stablemem{color:#8250df}
.cards{display:flex;gap:.8em;flex-wrap:wrap}.card{background:#fff;border:1px solid #dfe3e8;
 border-radius:4px;padding:.5em 1em;min-width:9em}.card b{font-size:1.4em;display:block}
img.media{max-width:100%;max-height:480px;border:1px solid #ccd;display:block;margin:.3em 0}
.err{background:#fff0f0;border:1px solid #e5b5b5;padding:.6em .9em}
nav.pages{margin:.8em 0}nav.pages a{margin-right:1em}
input[type=search]{width:18em;padding:.2em .4em}
"""


class BadRequest(Exception):
    """A query parameter or path that cannot be read: 400 with its message."""


class Missing(Exception):
    """Nothing at this address: 404 with its message."""


@dataclass
class Response:
    """What a page answers: status, body, media type, extra headers."""

    status: int
    body: bytes
    content_type: str = HTML_TYPE
    headers: dict[str, str] = field(default_factory=dict)


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def q(value: str) -> str:
    """A path segment or query value, percent-encoded."""
    return urllib.parse.quote(value, safe="")


def _ts(ts: Timestamp | None) -> str:
    return ts.isoformat() if ts is not None else ""


def _ns(at: int) -> str:
    return Timestamp(at, 0).strftime("%Y-%m-%d %H:%M:%S") + "Z" if at else ""


def _layer_label(layer: str) -> str:
    css = "context" if layer.startswith("context") else layer
    return f'<span class="l-{esc(css)}">{esc(layer)}</span>'


def _int_param(params: dict[str, list[str]], name: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(name, [""])[-1].strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"parameter {name}: not an integer: {raw!r}") from None
    if not lo <= value <= hi:
        raise BadRequest(f"parameter {name}: must be {lo} to {hi}, got {value}")
    return value


def _text_param(params: dict[str, list[str]], name: str) -> str:
    return params.get(name, [""])[-1].strip()


class WebView:
    """The pages of one store, read through one ``Reader`` (one request at a time)."""

    def __init__(self, reader: Reader, *, budget: int = 2000) -> None:
        self.reader = reader
        self.budget = budget
        self._lock = threading.Lock()
        self._manifests: dict[str, Manifest] = {}
        self._render: tuple[Any, str] | None = None
        self._listings: dict[tuple[str, ...], tuple[Any, dict[str, list[tuple[str, str]]]]] = {}
        self._legacy: tuple[Any, list[tuple[str, str]]] | None = None
        self._feed: list[Change] = []
        self._feed_pos = 0
        self._feed_id = ""
        self._feed_hint: tuple[str, int] = ("", 0)
        self._feed_stamp: tuple[int, int] | None = None
        self._horizon = 1
        self._graph_stamp: tuple[int, ...] | None = None
        self.routes: dict[str, Callable[[str, dict[str, list[str]]], Response]] = {
            "": self.overview, "timeline": self.timeline, "layer": self.layer,
            "unit": self.unit, "block": self.block, "graph": self.graph,
            "search": self.search, "changes": self.changes, "static.css": self.css}

    # -- dispatch -------------------------------------------------------------------------
    def get(self, target: str) -> Response:
        """The response to ``GET target`` (a path with its query string)."""
        parts = urllib.parse.urlsplit(target)
        path = urllib.parse.unquote(parts.path)
        try:
            params = urllib.parse.parse_qs(parts.query, keep_blank_values=True,
                                           strict_parsing=False, max_num_fields=20)
        except ValueError as exc:
            return self._error(400, f"bad query string: {exc}")
        head, _, rest = path.strip("/").partition("/")
        route = self.routes.get(head)
        if route is None or (rest and head not in ("layer", "unit", "block")) or \
                (not rest and head in ("layer", "unit", "block")):
            return self._error(404, f"no page at {path}")
        try:
            with self._lock:
                self._refresh()
                return route(rest, params)
        except BadRequest as exc:
            return self._error(400, str(exc))
        except (Missing, NotFound) as exc:
            return self._error(404, str(exc))
        except (FsmemError, OSError, ValueError) as exc:
            log.warning("%s: %s", target, exc)
            return self._error(500, f"{type(exc).__name__}: {exc}")

    def _error(self, status: int, message: str) -> Response:
        titles = {400: "Bad request", 404: "Not found", 405: "Method not allowed",
                  500: "Cannot read the store"}
        title = titles.get(status, str(status))
        return Response(status, self._page(title, f'<p class="err">{esc(message)}</p>'))

    def _refresh(self) -> None:
        """Take in what another process changed: graph.db reopened when its files changed
        (an immutable read connection would not see new rows)."""
        stamp: list[int] = []
        for suffix in ("", "-wal"):
            try:
                st = os.stat(os.path.join(self.reader.root, "graph.db" + suffix))
                stamp += [st.st_ino, st.st_size, st.st_mtime_ns]
            except OSError:
                stamp += [0, 0, 0]
        if self._graph_stamp is not None and tuple(stamp) != self._graph_stamp:
            self.reader.close()   # (closes only the graph connection; reopened on use)
        self._graph_stamp = tuple(stamp)

    # -- reading, cached ------------------------------------------------------------------
    def manifest(self, path: str, uid: str) -> Manifest:
        """A unit's manifest; cached by path, as a published unit never changes."""
        m = self._manifests.get(path)
        if m is None:
            m = read_manifest(path, expect_id=uid)
            if len(self._manifests) >= MANIFESTS_KEPT:
                self._manifests.clear()
            self._manifests[path] = m
        return m

    def listing(self, layers: tuple[str, ...] | None = None) -> dict[str, list[tuple[str, str]]]:
        """(unit id, path) of each layer, from one consistent view; kept while nothing
        could have changed it (the layer directories' inode, mtime and link count, the
        writers' epoch and the change feed the same, no journal entry pending): a layer of
        10,000 units is listed again only after a change."""
        names = self.reader.layout.layers() if layers is None else layers
        key = self._stamp(names)
        cached = self._listings.get(names)
        if cached is not None and cached[0] == key:
            return cached[1]
        view = self.reader.consistent(lambda v: v, names)
        got = {layer: view.layer(layer) for layer in view.units}
        if not view.pending:
            self._listings[names] = (key, got)
        return got

    def legacy_documents(self) -> list[tuple[str, str]]:
        """(id, "") of each HomeAgent ``documents/*.json``, kept as the listing is: while the
        directory's stamp is unchanged (a layer page does not scan 10,000 entries each time)."""
        key = self._stamp(("documents",))
        if self._legacy is None or self._legacy[0] != key:
            self._legacy = (key, [(legacy_id(f), "")
                                  for f, _ in legacy_doc_files(self.reader.root)])
        return self._legacy[1]

    def _stamp(self, names: tuple[str, ...]) -> Any:
        """What changes whenever a unit of ``names`` is added, moved or removed."""
        layout = self.reader.layout
        return (tuple(tuple(dir_stamp(os.path.join(layout.root, n))) for n in names),
                layout.epoch(), feed_stamp(layout.meta, self._feed_hint))

    def model_view(self, budget: int) -> str:
        """``Reader.render`` of L1, kept while L1 is unchanged (units are immutable)."""
        key = (self._stamp((self.reader.l1,)), budget)
        if self._render is None or self._render[0] != key or self.reader.layout.journal_names():
            self._render = (key, self.reader.render(budget))
        return self._render[1]

    def locate(self, uid: str) -> tuple[str, str, Manifest]:
        if not NAME_RE.match(uid):
            raise Missing(f"no unit {uid!r} (not a unit id)")
        for _ in range(3):   # a unit renamed to another layer while it was read: look again
            layer, path = self.reader.layout.locate(uid)
            try:
                m = self.manifest(path, uid)
            except (FsmemError, OSError):
                if self.reader.layout.vanished(path):
                    continue
                raise
            if not self.reader.sees(m):
                raise Missing(f"no unit {uid!r} visible to this agent")
            return layer, path, m
        raise Missing(f"unit {uid!r} keeps moving; reload the page")

    def feed(self) -> list[Change]:
        """The change feed's unit records, oldest first, read on from the last position."""
        meta = self.reader.layout.meta
        stamp = feed_stamp(meta, self._feed_hint)
        if stamp == self._feed_stamp:
            return self._feed
        try:
            got = read_changes(meta, self._feed_pos, hint=self._feed_hint, feed=self._feed_id)
        except ChangesTruncated:   # compacted past us, or a new feed: start from what is kept
            self._feed, self._feed_pos, self._feed_hint, self._feed_id = [], 0, ("", 0), ""
            try:
                got = read_changes(meta, 0)
            except ChangesTruncated as exc:
                got = read_changes(meta, exc.horizon - 1)
        self._feed_id, self._horizon = got.feed, got.horizon
        self._feed_pos, self._feed_hint, self._feed_stamp = got.last, got.hint, stamp
        self._feed.extend(r for r in got.records if r.kind not in MARKS)
        del self._feed[:-FEED_KEPT]
        return self._feed

    # -- page frame -----------------------------------------------------------------------
    def _page(self, title: str, body: str, query: str = "") -> bytes:
        nav = "".join(f'<a href="{href}">{esc(name)}</a>' for href, name in (
            ("/", "Overview"), ("/timeline", "Timeline"), ("/layer/context", "L1 context"),
            ("/layer/documents", "L2 documents"), ("/layer/stablemem", "L3 stablemem"),
            ("/graph", "Graph"), ("/changes", "Changes")))
        form = (f'<form action="/search" method="get"><input type="search" name="q" '
                f'value="{esc(query)}" placeholder="search every layer" aria-label="search">'
                ' <button type="submit">Search</button></form>')
        doc = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
               f"<title>{esc(title)} · fsmem</title><style>{_STYLE}</style></head><body>"
               f"<header><b>fsmem</b>{nav}{form}</header><main><h1>{esc(title)}</h1>"
               f"{body}</main></body></html>")
        return doc.encode("utf-8")

    def _ok(self, title: str, body: str, query: str = "") -> Response:
        return Response(200, self._page(title, body, query))

    def _unit_link(self, uid: str, label: str | None = None) -> str:
        if not uid:
            return "-"
        return f'<a href="/unit/{q(uid)}">{esc(label or uid)}</a>'

    def _changes_table(self, records: list[Change]) -> str:
        rows = []
        for r in records:
            where = (f"{_layer_label(r.src)} → {_layer_label(r.layer)}" if r.src
                     else _layer_label(r.layer))
            rows.append(f"<tr><td>{r.seq}</td><td>{esc(_ns(r.at))}</td><td>{esc(r.kind)}</td>"
                        f"<td>{where}</td><td>{self._unit_link(r.unit)}</td>"
                        f"<td>{esc(r.op)}</td></tr>")
        if not rows:
            return "<p>No changes recorded.</p>"
        return ("<table><tr><th>seq</th><th>when (UTC)</th><th>what</th><th>layer</th>"
                "<th>unit</th><th>by</th></tr>" + "".join(rows) + "</table>")

    # -- pages ----------------------------------------------------------------------------
    def css(self, rest: str, params: dict[str, list[str]]) -> Response:
        return Response(200, _STYLE.encode(), "text/css; charset=utf-8")

    def overview(self, rest: str, params: dict[str, list[str]]) -> Response:
        r = self.reader
        listing = self.listing()
        settings = r.search_settings()
        cards = "".join(
            f'<div class="card"><a href="/layer/{q(layer)}">{_layer_label(layer)}</a>'
            f"<b>{len(units)}</b>units</div>" for layer, units in listing.items())
        try:
            g = r.graph.stats()
            cards += (f'<div class="card"><a href="/graph">graph.db</a><b>'
                      f'{g.get("memory_block_edges", 0)}</b>edges, '
                      f'{g.get("memory_blocks", 0)} blocks</div>')
        except FsmemError as exc:
            cards += f'<div class="card">graph.db<br>{esc(exc)}</div>'
        facts = [("store", r.root), ("store id", r.layout.store_id() or "-"),
                 ("agent", r.agent or "default"), ("embedder", settings["embedder"]
                 + ("" if settings["embedder_installed"] else
                    f" (not installed: pip install 'fsmem[{settings['embedder_extra']}]')")),
                 ("ranker", settings["ranker"])]
        table = "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
                                    for k, v in facts) + "</table>"
        budget = _int_param(params, "budget", self.budget, 1, 1_000_000)
        view = self.model_view(budget)
        recent = self.feed()[-RECENT:][::-1]
        body = (f"{table}<h2>Units per layer</h2><div class=\"cards\">{cards}</div>"
                f"<h2>The model's view (render, {budget} tokens)</h2>"
                f"<pre>{esc(view) or '(L1 is empty)'}</pre>"
                f"<h2>What happened recently</h2>{self._changes_table(recent)}"
                '<p><a href="/changes">all changes</a></p>')
        return self._ok("Overview", body)

    def _event_html(self, ev: Event, uid: str, *, link_unit: bool = False) -> str:
        who = " · ".join(x for x in (ev.role, ev.source, ev.agent and f"agent {ev.agent}") if x)
        head = (f'<div class="meta">{esc(_ts(ev.timestamp))} · {esc(who)} · {esc(ev.id)}'
                + (f" · unit {self._unit_link(uid)}" if link_unit else "") + "</div>")
        parts = [head]
        if ev.input:
            parts.append(f'<div class="text">{esc(ev.input)}</div>')
        if ev.tools_used:
            parts.append(f'<div class="meta">tools: {esc(", ".join(ev.tools_used))}</div>')
        for tr in ev.tool_results:
            parts.append(f'<div class="meta">tool output of {esc(tr.name)}</div>'
                         f'<div class="text">{esc(tr.output)}</div>')
        if ev.response:
            parts.append(f'<div class="meta">response</div><div class="text">'
                         f'{esc(ev.response)}</div>')
        for digest, text in ev.texts.items():
            parts.append(f'<div class="meta">text attachment {esc(digest[:12])}</div>'
                         f'<div class="text">{esc(text)}</div>')
        for ref in ev.blocks:
            if ref.modality != "text":
                parts.append(self._media_html(ref, uid))
        return '<div class="ev">' + "".join(parts) + "</div>"

    def _media_html(self, ref: BlockRef, uid: str) -> str:
        href = f"/block/{q(ref.digest)}?unit={q(uid)}"
        dims = f" {ref.width}×{ref.height}" if ref.width and ref.height else ""
        label = esc(f"{ref.name or ref.digest[:12]} ({ref.mime}{dims}, {ref.size} bytes)")
        if ref.absent:
            return f'<div class="meta">{label}: its bytes were missing when adopted</div>'
        if ref.mime.startswith("image/") and ref.mime != "image/svg+xml":
            return (f'<a href="{href}"><img class="media" src="{href}" alt="{esc(ref.name)}"'
                    f' title="{label}"></a><div class="meta">{label}</div>')
        return f'<div class="meta">media: <a href="{href}" download>{label}</a></div>'

    def timeline(self, rest: str, params: dict[str, list[str]]) -> Response:
        events = self.reader.timeline()
        body = (f"<p>{len(events)} events of L1 ({esc(self.reader.l1)}), in original "
                "timestamp order.</p>"
                + "".join(self._event_html(ev, ev.unit_id, link_unit=True) for ev in events))
        return self._ok("L1 timeline", body)

    def layer(self, name: str, params: dict[str, list[str]]) -> Response:
        if not valid_layer(name):
            raise Missing(f"no layer {name!r} (context, context@AGENT, documents, stablemem)")
        page = _int_param(params, "page", 1, 1, 10**9)
        units = self.listing((name,)).get(name, [])
        # HomeAgent's documents/*.json (the drop-in), listed after fsmem's units
        legacy = self.legacy_documents() if name == "documents" else []
        units = legacy[::-1] + units   # shown newest first: fsmem's units, then HomeAgent's
        pages = max(1, -(-len(units) // PAGE_SIZE))
        if page > pages:
            raise Missing(f"layer {name}: no page {page} (it has {pages})")
        newest = units[::-1][(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
        rows = []
        for uid, path in newest:
            if not path:
                rows.append(self._legacy_row(uid))
                continue
            try:
                m = self.manifest(path, uid)
            except (FsmemError, OSError) as exc:
                rows.append(f"<tr><td>{esc(uid)}</td><td colspan=4>unreadable: {esc(exc)}"
                            "</td></tr>")
                continue
            if not self.reader.sees(m):
                rows.append(f"<tr><td>{esc(uid)}</td><td colspan=4>private to agent "
                            f"{esc(m.agent)}</td></tr>")
                continue
            summary = unit_label(path, m) or "-"   # the one rule of every view
            owner = "" if not m.agent and not m.private else \
                f'<span class="tag">{esc(m.agent or "default")}{", private" if m.private else ""}</span> '
            rows.append(f"<tr><td>{self._unit_link(uid)}</td><td>{len(m.events)}</td>"
                        f"<td>{esc(m.created_at.strftime('%Y-%m-%d %H:%M:%S'))}</td>"
                        f"<td>{owner}{esc(summary)}</td></tr>")
        nav = []
        if page > 1:
            nav.append(f'<a href="/layer/{q(name)}?page={page - 1}">← newer</a>')
        if page < pages:
            nav.append(f'<a href="/layer/{q(name)}?page={page + 1}">older →</a>')
        pager = f'<nav class="pages">page {page} of {pages} {" ".join(nav)}</nav>'
        table = ("<table><tr><th>unit</th><th>events</th><th>created</th><th>summary</th></tr>"
                 + "".join(rows) + "</table>") if rows else "<p>No units.</p>"
        return self._ok(f"Layer {name}", f"<p>{len(units)} units, newest first.</p>"
                        f"{pager}{table}{pager}")

    def _legacy_row(self, uid: str) -> str:
        try:
            doc = self.reader.document(uid)
        except (FsmemError, OSError) as exc:
            return f"<tr><td>{esc(uid)}</td><td colspan=3>unreadable: {esc(exc)}</td></tr>"
        label = summary_label(doc.summary, (doc.content,)) or "-"
        return (f"<tr><td>{self._unit_link(uid)}</td><td>{len(doc.events)}</td>"
                f"<td>{esc(doc.created_at.strftime('%Y-%m-%d %H:%M:%S'))}</td>"
                f'<td><span class="tag">HomeAgent</span> {esc(label)}</td></tr>')

    def _legacy_unit(self, uid: str) -> Response:
        """A HomeAgent document, read in place through the logged fallback."""
        try:
            doc = self.reader.document(uid)
        except (FsmemError, OSError) as exc:
            raise Missing(f"no unit {uid!r}") from exc
        fields = [("id", esc(doc.id)), ("layer", _layer_label(doc.layer)),
                  ("file", esc(doc.path) + ' <span class="tag">HomeAgent</span>'),
                  ("summary", esc(doc.summary) or "-"), ("created", esc(_ts(doc.created_at))),
                  ("source", esc(doc.source) or "-"),
                  ("tags", esc(", ".join(doc.tags)) or "-"), ("accesses", str(doc.access_count))]
        table = "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>"
                                    for k, v in fields) + "</table>"
        evs = "".join(self._event_html(ev, uid) for ev in sorted(
            doc.events, key=lambda e: (e.timestamp.ns, e.id)))
        return self._ok(doc.summary or uid, f"{table}<h2>Events ({len(doc.events)})</h2>{evs}")

    def unit(self, uid: str, params: dict[str, list[str]]) -> Response:
        try:
            layer, path, m = self.locate(uid)
        except (Missing, NotFound):
            if not NAME_RE.match(uid) or legacy_file_of(self.reader.root, uid) is None:
                raise
            return self._legacy_unit(uid)
        try:
            events = [hydrate_event(path, m.id, rec, m.agent) for rec in m.events]
        except (FsmemError, OSError) as exc:
            if self.reader.layout.vanished(path):
                raise Vanished(path) from exc
            raise
        count, last = self.reader.access_of(m, self.reader.access.stats().get(uid))
        fields = [("id", esc(m.id)), ("layer", _layer_label(layer)),
                  ("summary", esc(m.summary) or "-"), ("created", esc(_ts(m.created_at))),
                  ("updated", esc(_ts(m.updated_at))), ("source", esc(m.source) or "-"),
                  ("agent", esc(m.agent or "default") + (" (private)" if m.private else "")),
                  ("tags", " ".join(f'<span class="tag">{esc(t)}</span>' for t in m.tags)
                   or "-"),
                  ("entities", esc(", ".join(m.entities)) or "-"),
                  ("accesses", f"{count}" + (f", last {esc(_ts(last))}" if last else "")),
                  ("format", str(m.format)), ("embedder", esc(m.embedder) or "-")]
        for key, value in sorted(m.meta.items()):
            fields.append((f"meta {key}", self._unit_link(value) if key == "supersedes"
                           and NAME_RE.match(value) else esc(value)))
        table = "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>"
                                    for k, v in fields) + "</table>"
        ordered = sorted(events, key=lambda e: (e.timestamp.ns, e.id))
        evs = "".join(self._event_html(ev, uid) for ev in ordered)
        facts = self._relations_html(self.reader.graph.facts_of(uid).relations)
        body = (f"{table}<h2>Events ({len(events)})</h2>{evs}"
                f"<h2>Graph facts read from it</h2>{facts or '<p>None.</p>'}")
        return self._ok(m.summary or uid, body)

    def block(self, digest: str, params: dict[str, list[str]]) -> Response:
        if not DIGEST_RE.match(digest):
            raise Missing("no block there (a block is named by 64 lowercase hex)")
        uid = _text_param(params, "unit")
        ref, path = self._find_block(digest, uid)
        if ref.absent:
            raise Missing(f"block {digest}: its bytes were never stored")
        data = read_block(block_path(path, ref), ref.digest)   # open_regular; verified
        if ref.modality == "text":
            return Response(200, data, "text/plain; charset=utf-8")
        if any(ref.mime == t or (t.endswith("/") and ref.mime.startswith(t))
               for t in INLINE_MEDIA):
            return Response(200, data, ref.mime)
        name = (ref.name or digest[:16]).replace('"', "").replace("\\", "")
        name = "".join(c for c in name if c.isprintable()) or digest[:16]
        return Response(200, data, "application/octet-stream", {
            "Content-Disposition": f"attachment; filename*=UTF-8''{q(name)}"})

    def _find_block(self, digest: str, uid: str) -> tuple[BlockRef, str]:
        """The block's reference and unit directory: in the unit named (the pages' links),
        else in any unit visible (every manifest read once, then from the cache)."""
        if uid:
            _layer, path, m = self.locate(uid)
            for rec in m.events:
                for ref in rec.blocks:
                    if ref.digest == digest:
                        return ref, path
            raise Missing(f"unit {uid} holds no block {digest}")
        for units in self.listing().values():
            for unit_id, path in units:
                try:
                    m = self.manifest(path, unit_id)
                except (FsmemError, OSError):
                    continue
                if not self.reader.sees(m):
                    continue
                for rec in m.events:
                    for ref in rec.blocks:
                        if ref.digest == digest:
                            return ref, path
        raise Missing(f"no unit of the store holds block {digest}")

    def _relations_html(self, relations: list[Any]) -> str:
        rows = []
        for rel in relations:
            units = list(dict.fromkeys(p.unit_id for p in rel.provenance if p.unit_id))
            texts = [p.text for p in rel.provenance if p.text and not p.unit_id]
            prov = ", ".join(self._unit_link(u) for u in units) or esc("; ".join(texts)) or "-"
            rows.append(f'<tr><td><a href="/graph?entity={q(rel.source_name)}">'
                        f'{esc(rel.source_name)}</a></td><td>{esc(rel.relation_type)}</td>'
                        f'<td><a href="/graph?entity={q(rel.target_name)}">'
                        f'{esc(rel.target_name)}</a></td><td>{rel.confidence:.2f}</td>'
                        f"<td>{prov}</td></tr>")
        if not rows:
            return ""
        return ("<table><tr><th>subject</th><th>relation</th><th>object</th><th>confidence"
                "</th><th>read from</th></tr>" + "".join(rows) + "</table>")

    def graph(self, rest: str, params: dict[str, list[str]]) -> Response:
        entity = _text_param(params, "entity")
        form = (f'<form action="/graph" method="get"><input type="search" name="entity" '
                f'value="{esc(entity)}" placeholder="an entity" aria-label="entity"> '
                '<button type="submit">Show</button></form>')
        if not entity:
            return self._ok("Graph", form + "<p>Name an entity to see the facts around it "
                            "(both directions).</p>")
        depth = _int_param(params, "depth", 1, 1, 3)
        rec = self.reader.graph.neighbors(entity, depth=depth)
        ents = ", ".join(f'<a href="/graph?entity={q(e.name)}">{esc(e.name)}</a> '
                         f'<span class="meta">{esc(e.type)}, {e.mention_count} mentions</span>'
                         for e in rec.entities)
        table = self._relations_html(rec.relations)
        body = (form + (f"<h2>Entities</h2><p>{ents}</p>" if ents else "")
                + (f"<h2>Facts ({len(rec.relations)}, within {depth} hop"
                   f"{'s' if depth > 1 else ''})</h2>{table}" if table else
                   f"<p>No fact names {esc(entity)!s}.</p>"))
        return self._ok(f"Graph around {entity}", body)

    def search(self, rest: str, params: dict[str, list[str]]) -> Response:
        text = _text_param(params, "q")
        top_k = _int_param(params, "top_k", 10, 1, 100)
        if not text:
            return self._ok("Search", "<p>Type what to look for in the box above: every "
                            "layer is searched (L1, L2, L3 with its graph facts).</p>")
        hits = self.reader.search(text, top_k, count=False)
        rows = []
        for h in hits:
            facts = "".join(f"<div>fact: {esc(f.text)} "
                            f'<span class="meta">({f.confidence:.2f})</span></div>'
                            for f in h.facts)
            label = h.summary if h.kind == "unit" else ""
            rows.append(f"<tr><td>{h.score:.3f}</td><td>{_layer_label(h.layer)}</td>"
                        f"<td>{esc(h.kind)}</td><td>{self._unit_link(h.unit_id)}</td>"
                        f"<td>{esc(label[:200])}{facts}</td></tr>")
        table = ("<table><tr><th>score</th><th>layer</th><th>kind</th><th>unit</th>"
                 "<th>summary, facts</th></tr>" + "".join(rows) + "</table>") if rows \
            else "<p>No match.</p>"
        return self._ok(f"Search: {text}", f"<p>{len(hits)} hits (top {top_k}).</p>{table}",
                        text)

    def changes(self, rest: str, params: dict[str, list[str]]) -> Response:
        page = _int_param(params, "page", 1, 1, 10**9)
        feed = self.feed()
        pages = max(1, -(-len(feed) // PAGE_SIZE))
        if page > pages:
            raise Missing(f"changes: no page {page} (there are {pages})")
        end = len(feed) - (page - 1) * PAGE_SIZE
        shown = feed[max(0, end - PAGE_SIZE):end][::-1]
        nav = []
        if page > 1:
            nav.append(f'<a href="/changes?page={page - 1}">← newer</a>')
        if page < pages:
            nav.append(f'<a href="/changes?page={page + 1}">older →</a>')
        pager = f'<nav class="pages">page {page} of {pages} {" ".join(nav)}</nav>'
        body = (f"<p>{len(feed)} unit changes kept (the feed keeps records from "
                f"sequence number {self._horizon} on), newest first.</p>"
                f"{pager}{self._changes_table(shown)}{pager}")
        return self._ok("What happened recently", body)


# -- the HTTP server ---------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    """GET and HEAD of the view's pages; every other method is 405."""

    server_version = "fsmem-web"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    view: WebView
    check_host = True
    verbose = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):   # POST, PUT, DELETE, ...: not allowed here
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send(Response(405, self.view._error(405, f"method {self.command} is not "
                                                  "allowed: this view is read-only").body,
                            headers={"Allow": "GET, HEAD"}))

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        if self.check_host and not _local_host(self.headers.get("Host", "")):
            resp = self.view._error(400, "this view answers only to 127.0.0.1, localhost or "
                                    "[::1] (start it with --host to serve another name)")
        else:
            resp = self.view.get(self.path)
        self._send(resp, head=head)

    def _send(self, resp: Response, *, head: bool = False) -> None:
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(resp.body)

    def end_headers(self) -> None:
        for k, v in SECURITY_HEADERS:
            self.send_header(k, v)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        if self.verbose:
            log.info("%s %s", self.address_string(), format % args)


def _local_host(host: str) -> bool:
    """Whether a Host header names the loopback (with or without a port)."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[:host.find("]") + 1] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if ":" in host else host
    return name in LOCAL_HOSTS


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(reader: Reader, host: str = "127.0.0.1", port: int = 8765, *,
                check_host: bool = True, budget: int = 2000,
                verbose: bool = False) -> ThreadingHTTPServer:
    """A bound server of ``reader``'s view (port 0: any free port). ``check_host``: refuse a
    Host header that is not a loopback name. FsmemError naming the port when it is taken."""
    view = WebView(reader, budget=budget)
    handler = type("Handler", (_Handler,), {"view": view, "check_host": check_host,
                                            "verbose": verbose})
    cls = _Server6 if ":" in host else _Server
    try:
        return cls((host.strip("[]"), port), handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise FsmemError(f"port {port} on {host} is in use (choose another with "
                             "--port)") from exc
        raise FsmemError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") \
            from exc


def url_of(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{shown}:{port}/"


def open_reader(root: str, agent: str | None = None) -> Reader:
    """The store's Reader with its configured embedder and ranker; NotAStore (one line)
    when there is no store."""
    if not os.path.isdir(root):
        raise NotAStore(f"not an fsmem store: {os.path.abspath(root)} (no such directory)")
    return Reader.open(root, agent=agent)
