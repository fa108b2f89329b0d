"""Event records as JSON (the TextEvent / Event shapes), for ``fsmem append`` and the inbox.

One record per line (JSON Lines) or a single JSON object or array. A record with ``content``
is an SDK TextEvent; otherwise it is an Event (``input``, ``response``, ``tools_used``,
``tool_results`` [{name, output}], ``source``, ``timestamp``). Attachments carry ``data`` as
base64, or ``path``: a bare file name in the record's own folder (``base_dir``, a path or a
directory fd), never anything outside it.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

import msgspec

from fsmem.format.errors import FormatError
from fsmem.format.layout import open_regular, read_fd
from fsmem.format.media import sniff_mime
from fsmem.format.model import Event, MediaAttachment, TextEvent, ToolOutput
from fsmem.format.timestamps import Timestamp

__all__ = ["events_from_jsonl", "event_from_record", "decode_json"]

_any = msgspec.json.Decoder()
ATTACHMENT_CAP = 1 << 30   # a path attachment is read whole: at most this big
_EVENT_KEYS = {"timestamp", "source", "role", "input", "response", "tools_used", "tool_results",
               "attachments", "id", "content", "channel", "layer"}


def events_from_jsonl(text: str, name: str, base_dir: str | int | None = None) -> list[Event]:
    """Parse JSON Lines (or one JSON object/array); errors name the file and line."""
    stripped = text.strip()
    records: list[tuple[int, Any]] = []
    if stripped.startswith("["):
        records = [(1, r) for r in decode_json(stripped, f"{name}: ")]
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append((lineno, decode_json(line, f"{name}: line {lineno}: ")))
                except FormatError:
                    if lineno == 1 and stripped.startswith("{"):
                        try:
                            records = [(1, decode_json(stripped, f"{name}: "))]
                            break
                        except FormatError:
                            pass
                    raise
    return [event_from_record(rec, f"{name}: line {lineno}", base_dir) for lineno, rec in records]


def decode_json(text: str, where: str) -> Any:
    """One JSON value; FormatError says where and what (deep nesting: "nested too deeply")."""
    try:
        return _any.decode(text)
    except msgspec.DecodeError as exc:
        raise FormatError(f"{where}invalid JSON: {exc}") from exc
    except RecursionError as exc:
        raise FormatError(f"{where}invalid JSON: nested too deeply") from exc


def event_from_record(rec: Any, where: str, base_dir: str | int | None = None) -> Event:
    if not isinstance(rec, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    unknown = set(rec) - _EVENT_KEYS
    if unknown:
        raise FormatError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    atts = [_attachment(a, f"{where}: attachments[{i}]", base_dir)
            for i, a in enumerate(rec.get("attachments") or [])]
    try:
        ts = Timestamp.coerce(rec.get("timestamp"), field=f"{where}: timestamp")
        if "content" in rec:
            return TextEvent(role=_str(rec, "role", where), content=_str(rec, "content", where),
                             timestamp=ts, channel=_str(rec, "channel", where),
                             attachments=atts).to_event()
        results = [ToolOutput(name=_str(r, "name", where), output=_str(r, "output", where))
                   for r in rec.get("tool_results") or []]
        tools = rec.get("tools_used") or []
        if not all(isinstance(t, str) for t in tools):
            raise FormatError(f"{where}: tools_used must be a list of strings")
        return Event(timestamp=ts, source=_str(rec, "source", where) or "inbox",
                     role=_str(rec, "role", where), input=_str(rec, "input", where),
                     response=_str(rec, "response", where), tools_used=list(tools),
                     tool_results=results, attachments=atts, id=_str(rec, "id", where))
    except AttributeError as exc:
        raise FormatError(f"{where}: malformed record: {exc}") from exc


def _str(rec: Any, key: str, where: str) -> str:
    if not isinstance(rec, dict):
        raise FormatError(f"{where}: expected an object")
    value = rec.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FormatError(f"{where}: field {key!r} must be a string")
    return value


def _attachment(a: Any, where: str, base_dir: str | int | None) -> MediaAttachment:
    if not isinstance(a, dict):
        raise FormatError(f"{where}: expected an object")
    name, mime = _str(a, "name", where), _str(a, "mime", where)
    if a.get("data") is not None:
        try:
            data = base64.b64decode(_str(a, "data", where), validate=True)
        except binascii.Error as exc:
            raise FormatError(f"{where}: data is not valid base64: {exc}") from exc
    elif a.get("path"):
        data = _read_relative(_str(a, "path", where), base_dir, where)
        name = name or os.path.basename(_str(a, "path", where))
    elif a.get("digest"):
        return MediaAttachment(digest=_str(a, "digest", where), mime=mime, name=name)
    else:
        raise FormatError(f"{where}: needs data (base64), path or digest")
    return MediaAttachment(data=data, mime=mime or sniff_mime(data[:64]) or
                           "application/octet-stream", name=name)


def _read_relative(rel: str, base_dir: str | int | None, where: str) -> bytes:
    """Read an attachment named by a bare file name in the record's own folder (a path or a
    directory fd). Subdirectories, '..' and absolute paths are refused, and the file is opened
    with O_NOFOLLOW, so a record can never make fsmem read outside its folder."""
    if base_dir is None:
        raise FormatError(f"{where}: a path attachment needs the record's folder")
    if not rel or rel in (".", "..") or "/" in rel or "\\" in rel or "\x00" in rel:
        raise FormatError(f"{where}: path {rel!r} must name a file in the record's own folder")
    try:
        if isinstance(base_dir, int):
            fd = open_regular(rel, dir_fd=base_dir, cap=ATTACHMENT_CAP, one_link=True)
        else:
            fd = open_regular(os.path.join(base_dir, rel), cap=ATTACHMENT_CAP, one_link=True)
    except OSError as exc:
        raise FormatError(f"{where}: cannot open {rel!r}: {exc.strerror}") from exc
    except FormatError as exc:
        raise FormatError(f"{where}: {rel!r} is not a regular file with one name under "
                          f"{ATTACHMENT_CAP} bytes ({exc})") from exc
    try:
        return read_fd(fd, ATTACHMENT_CAP, rel)
    finally:
        os.close(fd)
