"""The web view (``fsmem serve``) on a store of 10,000 units: each page over HTTP beside its floors.

The store: N one-event L2 units (benchmarks/_store100k.build, ~120 characters of mixed zh/en
text each), then an image unit, a few L1 events and some graph facts. Each page is fetched
over HTTP from a real ``ThreadingHTTPServer`` (fsmem.interfaces.web.make_server, urllib client,
a new connection per request as a browser's first load makes), interleaved page by page and
round by round with its floors in the same run:

* ``view.get``: the same page built in process (no HTTP);
* ``Reader``: the bare Reader call the page is built on (search, timeline, render, a
  layer listing, a unit read whole, a block's bytes, the graph neighbours, the change feed);
* ``static``: the standard library's ``http.server`` serving a static file of the page's
  size, fetched by the same client (the cost of HTTP itself).

Reports p50 and p95 per page (ms) and the first load of each page (cold caches: the first
request after the server started). The store lives in a temporary directory this script
creates and removes (``--dir``: its parent; ``--cache DIR``: keep the built store there).

Usage: python benchmarks/bench_web.py [--units 10000] [--rounds 30] [--dir D] [--cache D]
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import text  # noqa: E402
from _store100k import build  # noqa: E402

from fsmem import Memory  # noqa: E402
from fsmem.format.model import Event, MediaAttachment  # noqa: E402
from fsmem.graph.distill import Triple  # noqa: E402
from fsmem.interfaces.web import make_server, url_of  # noqa: E402
from fsmem.memory.reader import Reader  # noqa: E402

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def make_store(root: str, units: int) -> dict[str, str]:
    build(root, units)
    rng = random.Random(7)
    mem = Memory.open(root, durability="off", auto_prune=False)
    png = (Path(__file__).resolve().parent.parent / "fsmem" / "interfaces" / "demo_data")
    image = next(png.glob("*.png"), None)
    data = image.read_bytes() if image else b"\x89PNG\r\n\x1a\n" + b"\0" * 1000
    out = {"image": mem.commit("a photo of the kitchen", summary="kitchen photo",
                               attachments=[MediaAttachment(data=data, mime="image/png",
                                                            name="kitchen.png")])}
    for i in range(20):
        mem.append(Event(source="user", role="user", input=text(rng, 200) + f" turn{i}"))
    with mem.store.locked():
        mem.graph.commit([Triple(f"person{i}", "works at", f"company{i % 7}")
                          for i in range(200)])
    out["unit"] = mem.units("documents")[units // 2]
    mem.close()
    return out


def fetch(url: str) -> bytes:
    with _OPENER.open(url, timeout=60) as resp:
        return resp.read()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


def pages(reader: Reader, ids: dict[str, str]) -> list[tuple[str, Callable[[], object]]]:
    """(page, the bare Reader call it is built on)."""
    digest = next(b.digest for b in reader.document(ids["image"]).blocks
                  if b.mime == "image/png")
    mid = max(1, len(reader.units("documents")) // 50 // 2)   # a page in the middle
    feed_mid = max(1, len(reader.changes()) // 50 // 2)
    return [
        ("/", lambda: (reader.render(2000), reader.consistent(lambda v: len(v.units)))),
        ("/timeline", reader.timeline),
        ("/layer/documents", lambda: reader.units("documents")),
        (f"/layer/documents?page={mid}", lambda: reader.units("documents")),
        (f"/unit/{ids['unit']}", lambda: reader.document(ids["unit"])),
        (f"/block/{digest}?unit={ids['image']}", lambda: reader.read_block(digest)),
        ("/graph?entity=person3", lambda: reader.graph.neighbors("person3", depth=1)),
        ("/search?q=kitchen+photo", lambda: reader.search("kitchen photo", 10, count=False)),
        ("/changes", lambda: reader.changes()),
        (f"/changes?page={feed_mid}", lambda: reader.changes()),
    ]


def run(root: str, ids: dict[str, str], rounds: int) -> None:
    reader = Reader.open(root)
    server = make_server(reader, "127.0.0.1", 0)
    base = url_of(server).rstrip("/")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    view = server.RequestHandlerClass.view
    bare = Reader.open(root)   # the floors' own reader (its caches are its own)
    static_dir = tempfile.mkdtemp(prefix="fsmem-bench-web-static-")
    handler = functools.partial(_Quiet, directory=static_dir)
    static = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=static.serve_forever, daemon=True).start()
    sbase = f"http://127.0.0.1:{static.server_address[1]}"
    try:
        todo = pages(bare, ids)
        first: dict[str, float] = {}
        sizes: dict[str, int] = {}
        for path, _call in todo:
            t = time.perf_counter()
            body = fetch(base + path)
            first[path] = time.perf_counter() - t
            sizes[path] = len(body)
            Path(static_dir, f"p{len(sizes)}.html").write_bytes(body)
        for _path, call in todo:
            call()   # the floor's warm-up
        times = {p: {"http": [], "view": [], "reader": [], "static": []} for p, _ in todo}
        for r in range(rounds):
            order = todo if r % 2 == 0 else todo[::-1]
            for path, call in order:
                i = [p for p, _ in todo].index(path) + 1
                for name, fn in (("http", lambda p=path: fetch(base + p)),
                                 ("view", lambda p=path: view.get(p)),
                                 ("reader", call),
                                 ("static", lambda i=i: fetch(f"{sbase}/p{i}.html"))):
                    t = time.perf_counter()
                    fn()
                    times[path][name].append(time.perf_counter() - t)
    finally:
        server.shutdown()
        static.shutdown()
        server.server_close()
        static.server_close()
        shutil.rmtree(static_dir, ignore_errors=True)
    print(f"{len(reader.units('documents'))} L2 units, {rounds} rounds interleaved; ms, "
          f"p50 (p95); load average {os.getloadavg()[0]:.2f}")
    print("| page | bytes | first load | HTTP | view.get (no HTTP) | Reader call | "
          "static file, same size | HTTP / static |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path, _ in todo:
        t = times[path]
        cell = {k: f"{pct(v, .5):.2f} ({pct(v, .95):.2f})" for k, v in t.items()}
        ratio = statistics.median(t["http"]) / statistics.median(t["static"])
        print(f"| `{path[:40]}` | {sizes[path]} | {first[path] * 1000:.1f} | {cell['http']} | "
              f"{cell['view']} | {cell['reader']} | {cell['static']} | {ratio:.2f}x |")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--dir", help="parent of the temporary store (default: system temp)")
    ap.add_argument("--cache", help="keep the built store here (<cache>/web-<units>) and "
                    "reuse it")
    args = ap.parse_args()
    if args.cache:
        root = os.path.join(os.path.abspath(args.cache), f"web-{args.units}")
        idfile = Path(root + ".ids")
        if not idfile.exists():
            ids = make_store(root, args.units)
            idfile.write_text(f"{ids['image']} {ids['unit']}\n")
        image, unit = idfile.read_text().split()
        run(root, {"image": image, "unit": unit}, args.rounds)
        return
    base = tempfile.mkdtemp(prefix="fsmem-bench-web-", dir=args.dir)
    try:
        ids = make_store(f"{base}/mem", args.units)
        run(f"{base}/mem", ids, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
