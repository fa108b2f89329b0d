"""``fsmem serve`` (fsmem.interfaces.web) over real HTTP, without a browser: every page's content,
the block bytes and their media type, the 400/404/405 answers, the Host check, new data seen
on the next load, and a view that writes nothing (every file's path, bytes and mtime hashed
before and after browsing every page, on a live store and on a ``chmod -R a-w`` copy)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import PKG_ROOT, solid_png

from fsmem import Memory
from fsmem.format.model import Event, MediaAttachment
from fsmem.interfaces.web import CSP, make_server, url_of
from fsmem.memory.reader import Reader

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never a proxy


MAGENTA = (233, 30, 199)
PNG = solid_png(320, 240, MAGENTA)


def build_store(root: Path) -> dict[str, str]:
    """L3 (a distilled unit with graph facts), L2 (a text unit, an image unit), L1 (a
    recalled unit and an appended event)."""
    mem = Memory.open(root, durability="off")
    ids = {"facts": mem.commit("Alice works at Acme. Bob lives in Paris.",
                               summary="people and places")}
    mem.distill(max_age_s=0, max_access=99)
    ids["wifi"] = mem.commit("the wifi password is hunter2 <b>bold</b>", summary="wifi note")
    ids["image"] = mem.commit("a photo of the magenta kitchen tiles", summary="tile photo",
                              attachments=[MediaAttachment(data=PNG, mime="image/png",
                                                           name="tiles.png")])
    ids["coffee"] = mem.commit("descale the coffee maker every two months", summary="coffee")
    ids["recalled"] = mem.recall("descale coffee maker", top_k=1)[0]
    mem.append(Event(source="user", role="user", input="here is the fridge door",
                     attachments=[MediaAttachment(data=solid_png(8, 8, (1, 2, 3)),
                                                  mime="image/png", name="fridge.png")]))
    mem.append(Event(source="user", role="user", input="what is on the calendar for friday"))
    mem.close()
    return ids


def tree_hash(root: Path) -> str:
    """Every path, its bytes and mtime, and every directory's entries (a created, changed or
    touched file changes it)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        h.update(f"D {os.path.relpath(dirpath, root)} {sorted(dirnames + filenames)}".encode())
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"F {os.path.relpath(p, root)} {st.st_mtime_ns} {st.st_size}".encode())
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None
          ) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class Served:
    def __init__(self, root: Path, *, check_host: bool = True) -> None:
        self.reader = Reader.open(root)
        self.server = make_server(self.reader, "127.0.0.1", 0, check_host=check_host)
        self.url = url_of(self.server)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def get(self, path: str, **kw) -> tuple[int, dict[str, str], str]:
        status, headers, body = fetch(self.url.rstrip("/") + path, **kw)
        return status, headers, body.decode("utf-8", "replace")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.reader.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("web") / "mem"
    return root, build_store(root)


@pytest.fixture(scope="module")
def served(store):
    s = Served(store[0])
    yield s
    s.close()


def _image_digest(root: Path, uid: str) -> str:
    doc = Reader.open(root).document(uid)
    return next(b.digest for b in doc.blocks if b.mime == "image/png")


def test_overview_names_the_store_counts_the_model_view_and_recent_changes(served, store):
    root, ids = store
    status, headers, body = served.get("/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert str(root) in body and "bm25" in body and "hash" in body
    assert re.search(r'l-documents">documents</span></a><b>2</b>', body)   # wifi, image
    assert re.search(r'l-stablemem">stablemem</span></a><b>1</b>', body)
    assert "The model's view" in body and "what is on the calendar for friday" in body
    assert ids["recalled"] in body and "move" in body   # the recall, among recent changes
    assert 'action="/search"' in body


def test_every_page_sends_the_security_headers(served):
    for path in ("/", "/nothing", "/layer/context?page=x"):
        _status, headers, _ = served.get(path)
        assert headers["Content-Security-Policy"] == CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "no-referrer"
    assert "<script" not in served.get("/")[2]


def test_unit_page_shows_text_in_full_escaped_and_the_image(served, store):
    root, ids = store
    status, _, body = served.get(f"/unit/{ids['wifi']}")
    assert status == 200
    assert "the wifi password is hunter2 &lt;b&gt;bold&lt;/b&gt;" in body
    assert "<b>bold</b>" not in body
    digest = _image_digest(root, ids["image"])
    status, _, body = served.get(f"/unit/{ids['image']}")
    assert f'<img class="media" src="/block/{digest}?unit={ids["image"]}"' in body
    assert "tiles.png" in body and "a photo of the magenta kitchen tiles" in body


def test_block_serves_the_image_bytes_with_its_media_type(served, store):
    root, ids = store
    digest = _image_digest(root, ids["image"])
    for path in (f"/block/{digest}?unit={ids['image']}", f"/block/{digest}"):
        status, headers, body = fetch(served.url.rstrip("/") + path)
        assert status == 200 and headers["Content-Type"] == "image/png" and body == PNG
    status, headers, body = fetch(served.url.rstrip("/") + f"/block/{digest}", method="HEAD")
    assert status == 200 and body == b"" and headers["Content-Length"] == str(len(PNG))
    text = next(b for b in Reader.open(root).document(ids["wifi"]).blocks if b.modality == "text")
    status, headers, body = fetch(served.url.rstrip("/") + f"/block/{text.digest}")
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert body == b"the wifi password is hunter2 <b>bold</b>"


def test_block_refuses_what_is_not_a_block_of_a_unit(served, store):
    root, ids = store
    digest = _image_digest(root, ids["image"])
    for path in ("/block/../../etc/passwd", "/block/%2e%2e%2fmarker.json",
                 "/block/" + "0" * 64, "/block/" + digest[:40], "/block/" + digest.upper(),
                 f"/block/{digest}?unit={ids['wifi']}", f"/block/{digest}?unit=../x",
                 "/block/" + digest + "/x"):
        status, _, body = served.get(path)
        assert status == 404, path
        assert "Traceback" not in body


def test_timeline_shows_the_recalled_unit_and_the_appended_event(served, store):
    _, ids = store
    status, _, body = served.get("/timeline")
    assert status == 200
    assert "descale the coffee maker every two months" in body
    assert f'/unit/{ids["recalled"]}' in body
    assert body.index("descale the coffee maker") < body.index("what is on the calendar")
    img = re.search(r'<img class="media" src="(/block/[0-9a-f]{64}\?unit=[^"]+)"', body)
    assert img and "fridge.png" in body   # L1's image inline
    status, _, data = fetch(served.url.rstrip("/") + img.group(1).replace("&amp;", "&"))
    assert status == 200 and data == solid_png(8, 8, (1, 2, 3))


def test_layer_pages_list_units_with_their_summary_newest_first(served):
    status, _, body = served.get("/layer/documents")
    assert status == 200 and "wifi note" in body and "tile photo" in body
    shown = re.findall(r'<td><a href="/unit/([^"]+)">', body)
    assert sorted(shown, reverse=True) == shown   # newest first (ids sort by creation time)
    status, _, body = served.get("/layer/context")
    assert "what is on the calendar for friday" in body   # no summary: the first text, as ls
    assert "page 1 of 1" in body
    assert served.get("/layer/stablemem")[2].count("people and places") == 1


def test_layer_pagination_fifty_a_page(tmp_path):
    mem = Memory.open(tmp_path / "m", durability="off")
    ids = [mem.commit(f"note number {i}", summary=f"note {i:03d}") for i in range(120)]
    mem.close()
    s = Served(tmp_path / "m")
    try:
        pages = [s.get(f"/layer/documents?page={n}")[2] for n in (1, 2, 3)]
        shown = [re.findall(r'<td><a href="/unit/([^"]+)">', p) for p in pages]
        assert [len(x) for x in shown] == [50, 50, 20]
        assert [u for page in shown for u in page] == sorted(ids, reverse=True)   # newest first, each unit once
        assert "page 1 of 3" in pages[0] and 'href="/layer/documents?page=2"' in pages[0]
        assert "?page=2" in pages[2] and "?page=4" not in pages[2]
        assert s.get("/layer/documents?page=4")[0] == 404
    finally:
        s.close()


def test_search_finds_every_layer_with_facts(served, store):
    _, ids = store
    status, _, body = served.get("/search?q=hunter2+password")
    assert status == 200 and ids["wifi"] in body and "wifi note" in body
    _, _, body = served.get("/search?q=descale+coffee")
    assert ids["recalled"] in body and 'l-context">context' in body
    _, _, body = served.get("/search?q=Alice&top_k=3")
    assert ids["facts"] in body and "fact: Alice works at Acme" in body
    assert 'value="Alice"' in body


def test_graph_shows_facts_both_ways_with_links(served, store):
    _, ids = store
    status, _, body = served.get("/graph?entity=Acme")   # the object: the edge arrives
    assert status == 200
    assert '<a href="/graph?entity=Alice">Alice</a>' in body and "works at" in body
    assert f'/unit/{ids["facts"]}' in body
    _, _, body = served.get(f"/unit/{ids['facts']}")
    assert "lives in" in body and '<a href="/graph?entity=Paris">' in body
    assert "No fact names" in served.get("/graph?entity=nobody-here")[2]


def test_changes_page_lists_the_feed_newest_first(served, store):
    _, ids = store
    status, _, body = served.get("/changes")
    assert status == 200 and ids["wifi"] in body and "publish" in body
    assert body.index(ids["recalled"]) < body.index(ids["wifi"])
    assert served.get("/changes?page=abc")[0] == 400


def test_bad_requests_not_found_and_methods(served):
    for path, want in (("/layer/context?page=abc", "parameter page: not an integer"),
                       ("/layer/context?page=0", "parameter page: must be"),
                       ("/search?q=x&top_k=0", "parameter top_k"),
                       ("/search?q=x&top_k=many", "parameter top_k")):
        status, _, body = served.get(path)
        assert status == 400 and want in body and "Traceback" not in body, path
    for path in ("/nothing", "/layer/bogus", "/unit/u-nope", "/unit/../../etc",
                 "/timeline/x", "/layer/"):
        assert served.get(path)[0] == 404, path
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        status, headers, _ = served.get("/", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD", method


def test_host_header_must_be_loopback_unless_a_host_was_given(served, store):
    for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example"):
        status, _, body = served.get("/", headers={"Host": host})
        assert status == 400 and "answers only to 127.0.0.1" in body, host
    for host in ("localhost:1234", "127.0.0.1", "[::1]:80"):
        assert served.get("/", headers={"Host": host})[0] == 200, host
    open_view = Served(store[0], check_host=False)
    try:
        assert open_view.get("/", headers={"Host": "my-box.lan"})[0] == 200
    finally:
        open_view.close()


def test_new_data_from_another_process_shows_on_the_next_load(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root, durability="off")
    mem.commit("first note about gardening", summary="garden")
    mem.close()
    s = Served(root)
    try:
        assert "garden" in s.get("/layer/documents")[2]
        assert "No match" in s.get("/search?q=zeppelin")[2]
        code = ("import sys; from fsmem import Memory; m = Memory.open(sys.argv[1]); "
                "u = m.commit('Carol flies a zeppelin to Oslo. Carol works at Zeppco.', "
                "summary='zeppelin'); m.distill(max_age_s=0, max_access=99); print(u)")
        uid = subprocess.run([sys.executable, "-c", code, str(root)], check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(PKG_ROOT)}).stdout.strip()
        assert uid in s.get("/layer/stablemem")[2]
        assert uid in s.get("/search?q=zeppelin")[2]
        assert uid in s.get("/changes")[2] and uid in s.get("/")[2]
        assert "Zeppco" in s.get("/graph?entity=Carol")[2]
    finally:
        s.close()


def _browse_everything(s: Served, ids: dict[str, str], digest: str) -> None:
    pages = ["/", "/timeline", "/layer/context", "/layer/documents", "/layer/stablemem",
             "/graph?entity=Alice", "/search?q=wifi", "/search?q=Alice+coffee", "/changes",
             f"/block/{digest}", "/static.css"] + [f"/unit/{u}" for u in ids.values()]
    for page in pages:
        assert s.get(page)[0] == 200, page


def test_browsing_every_page_writes_nothing(tmp_path, store):
    root, ids = store
    digest = _image_digest(root, ids["image"])
    before = tree_hash(root)
    s = Served(root)
    try:
        _browse_everything(s, ids, digest)
    finally:
        s.close()
    assert tree_hash(root) == before
    copy = tmp_path / "ro"
    shutil.copytree(root, copy)
    subprocess.run(["chmod", "-R", "a-w", str(copy)], check=True)
    try:
        before = tree_hash(copy)
        s = Served(copy)
        try:
            _browse_everything(s, ids, digest)
        finally:
            s.close()
        assert tree_hash(copy) == before
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(copy)], check=True)


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fsmem.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(PKG_ROOT)}, **kw)


def test_cli_serve_prints_its_url_serves_and_stops_cleanly_on_ctrl_c(store):
    root, ids = store
    proc = _cli("serve", "--root", str(root), "--port", "0")
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        status, _, body = fetch(url + f"unit/{ids['wifi']}")
        assert status == 200 and b"hunter2" in body
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_cli_serve_refuses_a_missing_store_a_bad_port_and_a_port_in_use(tmp_path, store):
    with socket.socket() as busy:   # the five commands run side by side (start-up dominates)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        missing = _cli("serve", "--root", str(tmp_path / "none"), "--port", "0")
        bad = [_cli("serve", "--root", str(store[0]), "--port", p) for p in ("99999", "http")]
        in_use = _cli("serve", "--root", str(store[0]), "--port", str(busy.getsockname()[1]))
        _, err = missing.communicate(timeout=60)
        assert missing.returncode == 1 and len(err.strip().splitlines()) == 1
        assert "not an fsmem store" in err and not (tmp_path / "none").exists()
        for proc in bad:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 2 and "argument --port" in err and "Traceback" not in err
        _, err = in_use.communicate(timeout=60)
    assert in_use.returncode == 1 and "is in use" in err and len(err.strip().splitlines()) == 1


def test_a_homeagent_memory_directory_shows_its_documents(tmp_path):
    """The drop-in: a HomeAgent directory served as it is: its documents/*.json are listed on
    the L2 page (after fsmem's units) and each opens whole; nothing is written."""
    root = tmp_path / "ha"
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "homeagent-memory",
                    root)   # (the source tree: a mutation run copies only the package)
    before = tree_hash(root)
    s = Served(root)
    try:
        status, _, body = s.get("/layer/documents")
        assert status == 200, body
        assert "doc_1789175727183004211" in body and "咖啡机" in body, body[:2000]
        status, _, body = s.get("/unit/doc_1789175727183004211")
        assert status == 200, body
        assert "密封圈换了，不漏了" in body and "HomeAgent" in body
        assert s.get("/unit/doc_nosuchdoc")[0] == 404
    finally:
        s.close()
    assert tree_hash(root) == before


def test_another_agents_private_unit_is_not_shown(tmp_path):
    root = tmp_path / "m"
    kitchen = Memory.open(root, agent="kitchen", auto_prune=False)
    secret = kitchen.commit("the alarm code is 4711", private=True)
    shared = kitchen.commit("the bin goes out on friday")
    kitchen.close()
    s = Served(root)   # the default agent's view
    try:
        assert s.get(f"/unit/{secret}")[0] == 404
        status, _, body = s.get(f"/unit/{shared}")
        assert status == 200 and "friday" in body
        status, _, body = s.get("/layer/documents")
        assert "private to agent kitchen" in body and "4711" not in body
        status, _, body = s.get("/search?q=alarm+code")
        assert status == 200 and secret not in body and "4711" not in body
    finally:
        s.close()
