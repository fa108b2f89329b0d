"""Mutation check: each mutation is applied to a temporary copy of the package and the tests
named for it must fail. The plan's eight (repair plan section 三) run the flow criteria; the
durability ones (issue 16: every fsync on the publish, journal and prune paths, the parent-dir
fsync after publish, the syncfs suspect) run the power-loss test; the item-15 ones run the crash
sweeps. A mutation that survives is a missing test.
Run: python tests/mutations.py [name-substring ...]  (exit 1 if any survives)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_flow_criteria.py"]

_ARCHIVE_LOOP = '''        for ref in rec.blocks:
            builder.add_existing(unit.path, ref)
        records.append(rec)'''

# the move of a recall hit (Reader's _recall_hit), with the line after it: unique in the file
_RECALL_MOVE = '''        mem.store.move(unit_id, "documents", mem.l1)
        mem._indexed(unit_id, "documents", added=False)
        return unit_id'''


def _after_recall(body: str) -> str:
    """Code run right after the recall rename, rewriting the recalled unit (a wrong recall)."""
    pad = " " * 8
    lines = ["import msgspec as _ms", "from fsmem.format.unit import read_manifest as _rm",
             "from fsmem.format.model import encode_pretty as _ep",
             "_p = mem.store.unit_dir(mem.l1, unit_id)", "_m = _rm(_p)",
             *body.strip().splitlines(),
             "open(_p + '/manifest.json', 'wb').write(_ep(_m))"]
    move, rest = _RECALL_MOVE.split("\n", 1)
    return move + "\n" + "\n".join(pad + line for line in lines) + "\n" + rest


MUTATIONS: dict[str, tuple[str, str, str]] = {
    "response truncated to 100 on archive": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        _blocks = []
        for ref in rec.blocks:
            if archive and ref.role == "response":
                _t = open(f"{unit.path}/{ref.digest}.txt", encoding="utf-8").read()
                ref = builder.add_text(_t[:100] + "...", role="response", created_at=ref.created_at)
            else:
                builder.add_existing(unit.path, ref)
            _blocks.append(ref)
        records.append(_ms.structs.replace(rec, blocks=_blocks))'''),
    "tools_used dropped": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        for ref in rec.blocks:
            builder.add_existing(unit.path, ref)
        records.append(_ms.structs.replace(rec, tools_used=[]) if archive else rec)'''),
    "timestamp rounded to HH:MM": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        for ref in rec.blocks:
            builder.add_existing(unit.path, ref)
        _ts = Timestamp(rec.timestamp.ns // 60_000_000_000 * 60_000_000_000, rec.timestamp.offset)
        records.append(_ms.structs.replace(rec, timestamp=_ts) if archive else rec)'''),
    "no text blocks (text only in a view)": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        _keep = [r for r in rec.blocks if not (archive and r.modality == "text")]
        for ref in _keep:
            builder.add_existing(unit.path, ref)
        records.append(_ms.structs.replace(rec, blocks=_keep, tool_results=[]) if archive else rec)'''),
    "input and response merged into one block": ("fsmem/memory/writer.py", '''        if draft.input:
            text_block(draft.input, "input", compute.source_text(draft.source, draft.input))
        if draft.response:''', '''        if draft.input or draft.response:
            _merged = draft.input + " → " + draft.response
            text_block(_merged, "input", compute.source_text(draft.source, _merged))
        if False:'''),
    "recall uses the document's created_at as the event time": (
        "fsmem/memory/recall.py", _RECALL_MOVE, _after_recall(
            "_m.events = [_ms.structs.replace(e, timestamp=_m.created_at) for e in _m.events]")),
    "recall does not carry the blocks": ("fsmem/memory/recall.py", _RECALL_MOVE, _after_recall('''
_m.events = [_ms.structs.replace(e, blocks=[b for b in e.blocks if b.modality == "text"]) for e in _m.events]
import os as _os
[_os.unlink(_os.path.join(_p, n)) for n in _os.listdir(_p) if not n.endswith((".txt", ".json", ".npy"))]''')),
    "recall truncates text to 2000 characters": ("fsmem/memory/recall.py", _RECALL_MOVE, _after_recall('''
from fsmem.format.blocks import write_block as _wb
_evs = []
for _e in _m.events:
    _bl = []
    for _b in _e.blocks:
        if _b.modality == "text":
            _t = open(f"{_p}/{_b.digest}.txt", encoding="utf-8").read()
            if len(_t) > 2000:
                _d, _ = _wb(_p, _t[:2000].encode(), _b.mime, sync=False)
                _tr = [_ms.structs.replace(x, block=_d) if x.block == _b.digest else x for x in _e.tool_results]
                _e = _ms.structs.replace(_e, tool_results=_tr)
                _b = _ms.structs.replace(_b, digest=_d, size=len(_t[:2000].encode()))
        _bl.append(_b)
    _evs.append(_ms.structs.replace(_e, blocks=_bl))
_m.events = _evs''')),
}


POWERLOSS = ["tests/test_powerloss.py"]
FLOW_CRASH = ["tests/test_flow_crash.py"]
HARDENING = ["tests/test_hardening.py"]
CHANGES = ["tests/test_changes.py"]
SIDE_BY_SIDE = ["tests/test_homeagent_side_by_side.py"]
AGENTS = ["tests/test_agents.py"]
HA_EXPORT = ["tests/test_homeagent_export.py"]
CLI_EDGES = ["tests/test_cli_edges.py"]

# name: (file, old, new, tests)
DURABILITY: dict[str, tuple[str, str, str, list[str]]] = {
    "watch: a torn unit left by a power loss before the batch's syncfs is not settled": (
        "fsmem/ingest/watch.py", """\
                            store.quarantine(path, f"torn-{uid}")""", """\
                            pass""", POWERLOSS),
    "recover: a journal entry naming a torn staged unit is applied": ("fsmem/store/store.py",
        "            torn = self._torn_staged(entry) + ", "            torn = [] + ", POWERLOSS),
    "recover and readers: a journal entry whose staged units are lost is applied": (
        "fsmem/format/layout.py", "                lost.append(staged)", "                pass",
        POWERLOSS),
    "append: its prune in a journal entry of its own (four barriers, not two)": (
        "fsmem/memory/appending.py", "        combined = mem.auto_prune and mem.context_protected >= 1",
        "        combined = False", ["tests/test_speed_append.py"]),
    "publish: no fsync of the parent directory after the rename": ("fsmem/store/store.py", """\
                try:
                    fsops.fsync_dir(os.path.dirname(dst))
                except OSError:""", """\
                try:
                    pass
                except OSError:""", POWERLOSS),
    "publish: no syncfs before the rename": ("fsmem/store/store.py", """\
                    fsops.syncfs(self.staging)  # every block, the manifest, the directories""",
                                             "                    pass", POWERLOSS),
    # Not listed: "publish: no fsync of the staging directory before the rename" (fsync
    # strategy) survives and is equivalent under the model: the unit's own directory and files
    # are fsync'd, the rename is made durable by the target's fsync, and publish fsyncs staging
    # again after the rename, so no crash state depends on the earlier one.
    "unit: no fsync of the unit directory (fsync strategy)": ("fsmem/format/unit.py", """\
        if self.sync:
            fsops.fsync_dir(self.path)""", """\
        if self.sync:
            pass""", POWERLOSS),
    "unit: no fsync of the manifest (fsync strategy)": ("fsmem/format/unit.py", """\
            if self.sync:
                fsops.fsync(fd)
        finally:""", """\
            pass
        finally:""", POWERLOSS),
    "block: no fsync of a block file (fsync strategy)": ("fsmem/format/blocks.py", """\
        if len(data):
            fsops.write_all(fd, data)
        if sync:
            fsops.fsync(fd)""", """\
        if len(data):
            fsops.write_all(fd, data)""", POWERLOSS),
    "journal: staged units not flushed before the entry (the syncfs suspect)": (
        "fsmem/store/store.py", """\
            self.write_file_atomic(path, encode_pretty(entry), sync=False)
            fsops.syncfs(self.journal_dir)""", """\
            self.write_file_atomic(path, encode_pretty(entry), sync=True)""", POWERLOSS),
    "journal: staging directory not fsynced before the entry (fsync strategy)": (
        "fsmem/store/store.py", """\
            if self.sync:
                fsops.fsync_dir(self.staging)
                self.feed.flush()
            self.write_file_atomic(path, encode_pretty(entry), sync=True)""", """\
            if self.sync:
                self.feed.flush()
            self.write_file_atomic(path, encode_pretty(entry), sync=True)""", POWERLOSS),
    "journal: entry written without fsync": (
        "fsmem/store/store.py", "self.write_file_atomic(path, encode_pretty(entry), sync=True)",
        "self.write_file_atomic(path, encode_pretty(entry), sync=False)", POWERLOSS),
    "atomic file: data not fsynced before the rename": ("fsmem/store/store.py", """\
            if sync:
                fsops.fsync(fd)
        except BaseException:""", """\
            pass
        except BaseException:""", POWERLOSS),
    "atomic file: directory not fsynced after the rename": ("fsmem/store/store.py", """\
        fsops.replace(tmp, path)
        if sync:
            fsops.fsync_dir(os.path.dirname(path))""", """\
        fsops.replace(tmp, path)""", POWERLOSS),
    "journal apply: published parents not fsynced": ("fsmem/store/store.py", """\
            for parent in [*sorted(touched), self.staging]:
                fsops.fsync_dir(parent)""", """\
            for parent in [self.staging]:
                fsops.fsync_dir(parent)""", POWERLOSS),
    "journal apply (syncfs): renames and removals not flushed": ("fsmem/store/store.py", """\
            fsops.syncfs(self.staging)  # every rename and removal of the entry: one barrier""",
                                                                 "            pass", POWERLOSS),
    "publish (batch): no flush of the staged unit before the rename": ("fsmem/store/store.py", """\
                wait = self.flush_staged_start([builder.path], files, dirs)""", """\
                wait = lambda: None""", POWERLOSS),
    "publish (batch): the layer directory not flushed after the rename": ("fsmem/store/store.py", """\
            wait = fsops.flush_many_start([], [os.path.dirname(dst)])""", """\
            wait = fsops.flush_many_start([], [])""", POWERLOSS),
    "batch wave: the files' data not flushed (only the directories)": ("fsmem/store/store.py", """\
        return fsops.flush_many_start(names, [*paths, self.staging, *dirs])""", """\
        return fsops.flush_many_start([], [*paths, self.staging, *dirs])""", POWERLOSS),
    "batch wave: the staged unit's directory not flushed": ("fsmem/store/store.py", """\
        return fsops.flush_many_start(names, [*paths, self.staging, *dirs])""", """\
        return fsops.flush_many_start(names, [self.staging, *dirs])""", POWERLOSS),
    "journal (batch): staged units not flushed with the entry": ("fsmem/store/store.py", """\
            self.flush_staged([os.path.join(self.staging, staged)""", """\
            self.flush_staged([] and [os.path.join(self.staging, staged)""", POWERLOSS),
    "journal (batch): entry not in the wave": ("fsmem/store/store.py", """\
                              files=(path, *files), dirs=(self.journal_dir, *dirs))""", """\
                              files=files, dirs=dirs)""", POWERLOSS),
    "journal apply (batch): published parents not flushed": ("fsmem/store/store.py", """\
            fsops.flush_many([], [*sorted(touched), self.staging])""", """\
            fsops.flush_many([], [self.staging])""", POWERLOSS),
    "journal apply (prune): removal of an original not fsynced": ("fsmem/store/store.py", """\
                self.discard(path, sync=False, defer=defer_trash, record=False)
                touched.add(os.path.dirname(path))""", """\
                self.discard(path, sync=False, defer=defer_trash, record=False)""", POWERLOSS),
    # Not listed: "journal apply: entry removal not fsynced" is equivalent (a journal entry
    # that comes back after a power loss is applied again, and applying is idempotent:
    # targets already published are skipped, removed units are already gone), so under
    # syncfs the entry's removal is not flushed at all; under fsync it still is, so that the
    # mutant below is killed by every "all lost" state, not only by a lucky random mix.
    "move (recall): parents not fsynced": ("fsmem/store/store.py", """\
            elif self.sync:
                fsops.fsync_dir(os.path.dirname(dst))
                fsops.fsync_dir(os.path.dirname(src))""", """\
            elif False:
                pass""", POWERLOSS),
    "move (recall, batch): parents not flushed": ("fsmem/store/store.py", """\
                fsops.flush_many([], [os.path.dirname(dst), os.path.dirname(src)])""", """\
                pass""", POWERLOSS),
    # item 15
    "legacy recall: the JSON unlinked before the unit is published": ("fsmem/homeagent/documents.py", """\
    meta = dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version,""", """\
    fsops.unlink(path)
    meta = dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version,""",
        ["tests/test_legacy_crash.py"]),
    # h16: recall, turn and distill after their durable point
    "recall: the pin and the prune after the moves fail the recall": ("fsmem/memory/recall.py", """\
    after_write(mem.store, lambda: _pin(mem, moved),
                lambda: prune(query=query) if mem.auto_prune else None)""", """\
    _pin(mem, moved)
    if mem.auto_prune:
        prune(query=query)""", HARDENING),
    "recall: a later hit's failure fails the recall": ("fsmem/memory/recall.py", """\
            if not moved and not uid:
                raise""", """\
            raise""", HARDENING),
    "distill: a failure after a graph commit fails the run": ("fsmem/memory/stablemem.py", """\
                if not report.committed:
                    raise""", """\
                raise""", HARDENING),
    "turn: a response that cannot be stored leaves the input stored": ("fsmem/memory/turn.py", """\
    ids, archived, outcome = append_burst(""", """\
    for _ev in events[:-1]:
        mem._append_draft(_ev)
    ids, archived, outcome = append_burst(""", HARDENING),
    "discard: delete in place instead of one rename out of sight": ("fsmem/store/store.py", """\
            fsops.rename(path, trash)
        if self.sync if sync is None else sync:""", """\
            fsops.rmtree(path)
            return
        if self.sync if sync is None else sync:""", FLOW_CRASH + POWERLOSS),
    # issue 27: the change feed
    "feed: a move's record written after its rename": ("fsmem/store/store.py", """\
            self.record("move", dst_layer, unit_id, src=src_layer)
            # Readers are told, as for a journaled change: a listing of the layers that
            # straddles the rename (the source listed after it, the target before) would
            # miss the unit; with the epoch moved it is taken again. (Best effort: a rename
            # needs no space, a full disk must not stop it.)
            self._bump_quietly(unit_id)
            self.rename_dir(src, dst)""", """\
            self._bump_quietly(unit_id)
            self.rename_dir(src, dst)
            self.record("move", dst_layer, unit_id, src=src_layer)""", CHANGES + FLOW_CRASH),
    "feed: a publish writes no record": ("fsmem/store/store.py", """\
            self.feed.note("publish", layer, builder.unit_id, op=op)""", """\
            pass""", CHANGES),
    "feed: a journaled change writes no records": ("fsmem/store/store.py", """\
        for _staged, layer, unit_id in entry.publish:
            self.feed.note("publish", layer, unit_id, op=entry.op)""", """\
        for _staged, layer, unit_id in []:
            self.feed.note("publish", layer, unit_id, op=entry.op)""", CHANGES),
    "feed: a session's begin stamp not compared (plain-tool edits trusted)": (
        "fsmem/store/changes.py", """\
            ok = ok and r.dirs.get(layer) == expect""", """\
            ok = ok""", CHANGES),
    "index: a hit trusted without checking its unit's identity": ("fsmem/search/index.py", """\
        return {u for u in unit_ids if not self.legacy_file(u)""", """\
        return set() and {u for u in unit_ids if not self.legacy_file(u)""", CHANGES),
    "index: a postings chunk read by a search without its checksum": (
        "fsmem/search/index_files.py", """\
        if post.check is not None:
            post.check(lo, hi)
        out.append""", """\
        out.append""", ["tests/test_index_open.py"]),
    "index: embed_index drops a unit another thread indexed meanwhile": (
        "fsmem/search/index.py", "    index.unembedded.difference_update(todo)",
        "    index.unembedded.clear()", ["tests/test_search_threads.py"]),
    "index: a unit the feed names as gone is kept": ("fsmem/search/index.py", """\
            if ident is None:
                if have is not None:""", """\
            if ident is None:
                if have is None:""", CHANGES),
    "l1cache: an appended unit's terms tokenised from its blocks read back": (
        "fsmem/memory/l1cache.py",
        "self.written.get(pairs[i][0].unit_id))",
        "None)",
        ["tests/test_speed_l1cache.py"]),
    # issue 34: agent namespaces
    "agents: every agent writes, ranks and prunes one shared L1": (
        "fsmem/memory/reader.py", "        self.l1 = l1_layer(self.agent)",
        '        self.l1 = "context"', AGENTS),
    "agents: another agent's private unit is a hit": ("fsmem/search/index.py",
        "        if private and agent != self.viewer:\n            return False",
        "        if False:\n            return False", AGENTS),
    "agents: an archive unit mixes the agents of its events": ("fsmem/memory/prune.py",
        "        parts.setdefault((m.agent, m.private, m.meta.get(\"supersedes\", \"\")), [])"
        ".append(pair)", "        parts.setdefault(('', False, ''), []).append(pair)", AGENTS),
    "agents: an archive unit is the pruning agent's, not its events'": (
        "fsmem/memory/prune.py", "                            agent=pairs[0][0].manifest.agent,",
        "                            agent=mem.agent,", AGENTS),
    "agents: a recall moves into the default agent's L1": ("fsmem/memory/recall.py",
        _RECALL_MOVE, _RECALL_MOVE.replace("mem.l1", '"context"', 1), AGENTS),
    "agents: any agent's write ticks every pin": ("fsmem/store/pins.py",
        '    name = PINS_FILE if layer == "context" else f"pins@{layer_agent(layer)}.json"',
        "    name = PINS_FILE", AGENTS),
    "agents: an updated unit stays a hit": ("fsmem/search/index.py",
        "        if superseded:\n            for old in superseded:",
        "        if False:\n            for old in superseded:", AGENTS),
    "agents: a private unit distilled into the shared graph": ("fsmem/memory/stablemem.py",
        "    if doc.private:   # L3 is shared", "    if False:   # L3 is shared", AGENTS),
    "agents: the owners of units not saved with the index": ("fsmem/search/index_files.py",
        '        self.u_owner = arrays["u_owner"]',
        '        self.u_owner = np.zeros(len(arrays["u_owner"]), np.int32)', AGENTS),
    "agents: an update that left documents/ no longer hides the old version": (
        "fsmem/search/index.py", "        if elsewhere:\n            self.moved_supersedes[unit_id] = old",
        "        if False:\n            self.moved_supersedes[unit_id] = old", AGENTS),
    "agents: the archive unit of a pruned update forgets what it updates": (
        "fsmem/memory/prune.py", '            meta["supersedes"] = pairs[0][0].manifest.meta["supersedes"]',
        "            pass", AGENTS),
    "homeagent export: context.json events in arrival order, not timestamp order": (
        "fsmem/ingest/homeagent_export.py", "        events.sort(key=lambda e: e[:3])",
        "        events.sort(key=lambda e: (e[1], e[2]))", HA_EXPORT),
    "homeagent export: an adopted block loses its HomeAgent id": (
        "fsmem/ingest/homeagent_export.py", "    if ref.legacy_id:\n        return ref.legacy_id",
        "    if False:\n        return ref.legacy_id", HA_EXPORT),
    # issue 32: HomeAgent side by side (fsck, warnings, the report)
    "homeagent side by side: fsck --fix quarantines a damaged HomeAgent document": (
        "fsmem/memory/fsck.py", "    if left is not None:\n        finding.left = left",
        "    if False:\n        finding.left = left", SIDE_BY_SIDE),
    "homeagent side by side: fsck --fix exits 0 with a finding left": (
        "fsmem/interfaces/cli/main.py", "        return 0 if all(f.fixed for f in findings) else 1",
        "        return 0", SIDE_BY_SIDE),
    "homeagent side by side: a warning per legacy document on every command": (
        "fsmem/homeagent/documents.py", '    log.info("%s", message)',
        '    log.warning("%s", message)', SIDE_BY_SIDE),
    "homeagent side by side: verify-legacy trusts a changed file": (
        "fsmem/homeagent/report.py", '        elif now[rel]["blake3"] == digest:',
        "        elif True:", SIDE_BY_SIDE),
    # issue 32: HomeAgent side by side
    "homeagent: a rewritten document is left out of the index": (
        "fsmem/search/index.py",
        '            if st.state == "same":   # a unit holds these bytes',
        '            if st.state != "plain":   # a unit holds these bytes',
        ["tests/test_homeagent_corunning.py"]),
    "homeagent: HomeAgent's in-place rewrites not looked for": (
        "fsmem/search/index.py", "        if not self.legacy_idents:\n            return set()",
        "        if True:\n            return set()", ["tests/test_homeagent_corunning.py"]),
    "homeagent: a block whose media is gone dropped on recall": (
        "fsmem/homeagent/documents.py",
        "            refs.append(block_ref(_absent_ref(m, mem.root, created), m, mem.root))",
        "            pass", ["tests/test_homeagent_corunning.py"]),
    "homeagent: a vector-only block dropped on recall": (
        "fsmem/homeagent/documents.py",
        '        if not m.payload:   # a vector-only block: an empty block file, every field kept\n'
        '            ref = builder.add_bytes(b"", m.mime or "application/octet-stream",\n'
        '                                    role="attachment", created_at=created)\n'
        '            refs.append(block_ref(ref, m, mem.root))\n            continue',
        "        if not m.payload:\n            continue", ["tests/test_homeagent_corunning.py"]),
    "homeagent: homeagent_files = keep ignored": (
        "fsmem/homeagent/documents.py",
        '    return getattr(mem, "homeagent_files", "move") == "keep"', "    return False",
        ["tests/test_homeagent_corunning.py"]),
    # issue 34: the fleet index (tests against a real PostgreSQL)
    "fleet: another agent's private unit is a hit": (
        "fsmem/fleet/search.py", '        where.append("(NOT u.private OR u.agent = %(agent)s)")',
        "        pass", ["tests/test_fleet.py"]),
    "fleet: an updated unit stays a hit": (
        "fsmem/fleet/search.py", "    where.append(f\"NOT EXISTS (SELECT 1 FROM {UNITS} n WHERE n.store_id = u.store_id \"",
        "    where.append(f\"NOT EXISTS (SELECT 1 FROM {UNITS} n WHERE FALSE AND n.store_id = u.store_id \"",
        ["tests/test_fleet.py"]),
    "fleet: a listing keeps the rows of units that are gone": (
        "fsmem/fleet/sync.py", "    out.deleted = w.delete(u for u in known if u not in present)",
        "    out.deleted = 0", ["tests/test_fleet.py"]),
    "analyze: the stemmer called from two threads at once": (
        "fsmem/search/analyze.py", "        with _stem_lock:", "        if True:",
        ["tests/test_analyze.py", "tests/test_search_threads.py"]),
    "cli edges: config KEY VALUE rewrites the whole file (the user's comments dropped)": (
        "fsmem/store/config.py", "    return _write_text(path, text)\n",
        "    return write_config(root, want)\n", CLI_EDGES),
    "cli edges: distill --max-age takes a negative age": (
        "fsmem/interfaces/cli/graph.py", "type=nonneg_float, default=72.0",
        "type=float, default=72.0", CLI_EDGES),
    "cli edges: the plain progress bar redraws on every unit": (
        "fsmem/interfaces/cli/progress.py",
        "        if filled == self.drawn and done < total and now - self.at < 1.0:",
        "        if False:", CLI_EDGES),
    # issue 30: the agent's surface
    "history: the versions after a unit are not followed": (
        "fsmem/memory/reader.py",
        "        while (nxt := self.index.superseded_by(chain[-1].id)) and nxt not in seen:",
        "        while False and (nxt := self.index.superseded_by(chain[-1].id)):",
        ["tests/test_history.py"]),
    "fsck: a unit updated twice is not reported": (
        "fsmem/memory/fsck.py", "        for new in news[1:]:", "        for new in news[2:]:",
        ["tests/test_history.py"]),
    "config: a new embedder leaves the stored units unembedded": (
        "fsmem/interfaces/cli/show.py", "        reembed(args, open_writer)\n",
        "        pass\n", ["tests/test_search_all.py"]),
    "web: a search counts its hits in the access log": (
        "fsmem/interfaces/web.py", "        hits = self.reader.search(text, top_k, count=False)",
        "        hits = self.reader.search(text, top_k, count=True)", ["tests/test_web.py"]),
    "import: a refused import leaves the store it made": (
        "fsmem/interfaces/cli/archive.py", "            _remove_if_empty(mem.root)",
        "            pass", ["tests/test_cli_edges.py"]),
}


def run_suite(pkg_root: Path, tests: list[str] = TESTS) -> tuple[int, str]:
    """(pytest exit code, first failing test). Exit 1 means a test failed: a kill; any other
    non-zero code (collection error, crash) means the mutant was broken, not caught."""
    env = {**os.environ, "FSMEM_TEST_PKG_ROOT": str(pkg_root)}
    # One process (-n 0): with xdist workers, -x ends a red run as "interrupted" (exit 2).
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-x", "-q",
                           "-p", "no:cacheprovider",
                           *tests], cwd=REPO, env=env, capture_output=True, text=True)
    failed = next((ln.split(" ")[1] for ln in proc.stdout.splitlines()
                   if ln.startswith("FAILED ")), "")
    return proc.returncode, failed


def main(args: list[str]) -> int:
    survivors = []
    every = {name: (rel, old, new, TESTS) for name, (rel, old, new) in MUTATIONS.items()}
    every.update(DURABILITY)
    chosen = {n: m for n, m in every.items() if not args or any(a in n for a in args)}
    with tempfile.TemporaryDirectory(prefix="fsmem-mut-") as tmp:
        base = Path(tmp) / "clean"
        shutil.copytree(REPO / "fsmem", base / "fsmem")
        for tests in {tuple(m[3]) for m in chosen.values()}:
            if run_suite(base, list(tests))[0] != 0:
                print(f"the unmutated package fails {' '.join(tests)}; fix that first")
                return 1
        def one(i: int, name: str, rel: str, old: str, new: str, tests: list[str]) -> str:
            copy = Path(tmp) / f"m{i}"
            shutil.copytree(REPO / "fsmem", copy / "fsmem")
            path = copy / rel
            text = path.read_text(encoding="utf-8")
            if text.count(old) != 1:
                return f"MUTATION NOT APPLICABLE ({rel} changed?): {name}"
            path.write_text(text.replace(old, new), encoding="utf-8")
            code, failed = run_suite(copy, tests)
            verdict = {0: "SURVIVED", 1: "killed"}.get(code, f"BROKEN({code})")
            return f"{verdict:>8}: {name}  [{failed}]"
        # one mutant per core at a time (each runs its tests in one process, -n 0)
        with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
            futures = [(name, pool.submit(one, i, name, *m))
                       for i, (name, m) in enumerate(chosen.items())]
            for name, fut in futures:
                line = fut.result()
                print(line, flush=True)
                if not line.lstrip().startswith("killed:"):
                    survivors.append(name)
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} mutations killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
