"""Exact timestamps: nanoseconds since the epoch plus the UTC offset they were written with.

HomeAgent writes Go times (RFC 3339 with up to nine fraction digits and a zone offset). A
Python ``datetime`` holds only microseconds, so fsmem keeps its own value type and never rounds.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timedelta, timezone
from functools import total_ordering

from fsmem.format.errors import FormatError

__all__ = ["Timestamp"]

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The Gregorian calendar repeats every 400 years (146,097 days, whole weeks): a wall-clock time
# in year 0 (Go's zero time in a zone west of UTC, "0000-12-31T19:00:00-05:00") is read and
# written through the same time 400 years later, which Python's datetime can hold.
_CYCLE_YEARS = 400
_CYCLE_S = 146_097 * 86_400
# Wall-clock seconds since the epoch of 0000-01-01T00:00:00 and of 10000-01-01T00:00:00: the
# range RFC 3339 (four-digit years) and Go's time formatting share.
_LOCAL_MIN_S = (datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // timedelta(seconds=1) - 366 * 86_400
_LOCAL_END_S = (datetime(9999, 12, 31, tzinfo=timezone.utc) - _EPOCH) // timedelta(seconds=1) + 86_400


@total_ordering
class Timestamp:
    """An instant with nanosecond precision and the UTC offset (seconds east) it was written in.

    Equality compares instant and offset, so a value survives a round trip exactly; ordering
    is by instant first, then offset, so sorting is total and deterministic.
    """

    __slots__ = ("ns", "offset", "_iso")

    def __init__(self, ns: int, offset: int = 0) -> None:
        if not isinstance(ns, int) or not isinstance(offset, int):
            raise TypeError("Timestamp(ns, offset) takes two ints")
        if not -86400 < offset < 86400:
            raise ValueError(f"UTC offset out of range: {offset}s")
        if not _LOCAL_MIN_S <= ns // 1_000_000_000 + offset < _LOCAL_END_S:
            raise FormatError(f"timestamp out of range: {ns} ns at UTC offset {offset}s is "
                              "not within years 0000-9999 on its wall clock")
        object.__setattr__(self, "ns", ns)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "_iso", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Timestamp is immutable")

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, *, field: str = "timestamp") -> "Timestamp":
        """Parse RFC 3339 (as Go's RFC3339Nano writes it) without losing a digit."""
        if not isinstance(text, str):
            raise FormatError(f"{field}: expected an RFC 3339 string, got {type(text).__name__}")
        m = _RFC3339.match(text.strip())
        if not m:
            raise FormatError(f"{field}: not an RFC 3339 timestamp: {text!r}")
        y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
        shift = _CYCLE_YEARS if int(y) == 0 else 0   # year 0: read 400 years on
        try:
            base = datetime(int(y) + shift, int(mo), int(d), int(h), int(mi), int(s),
                            tzinfo=timezone.utc)
        except ValueError as exc:
            raise FormatError(f"{field}: {exc}: {text!r}") from exc
        offset = 0 if z or not sign else (int(oh) * 3600 + int(om) * 60) * (1 if sign == "+" else -1)
        if not -86400 < offset < 86400:
            raise FormatError(f"{field}: UTC offset out of range: {text!r}")
        frac_ns = int((frac or "0").ljust(9, "0"))
        whole = (base - _EPOCH) // timedelta(seconds=1) - (_CYCLE_S if shift else 0)
        try:
            return cls(whole * 1_000_000_000 + frac_ns - offset * 1_000_000_000, offset)
        except FormatError as exc:
            raise FormatError(f"{field}: {exc}: {text!r}") from None

    @classmethod
    def from_datetime(cls, dt: datetime) -> "Timestamp":
        """From an aware datetime (a naive one is taken as UTC)."""
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        off = dt.utcoffset() or timedelta(0)
        delta = dt - _EPOCH
        ns = (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
        return cls(ns, int(off.total_seconds()))

    @classmethod
    def from_unix(cls, seconds: int | float, offset: int = 0) -> "Timestamp":
        """From Unix seconds (the SDK's TextEvent.timestamp is int64 seconds)."""
        if isinstance(seconds, int):
            return cls(seconds * 1_000_000_000, offset)
        if not math.isfinite(seconds) or abs(seconds) > 1e12:   # past year 10000 either way
            raise FormatError(f"timestamp out of range: {seconds} Unix seconds")
        return cls(round(seconds * 1_000_000_000), offset)

    @classmethod
    def now(cls) -> "Timestamp":
        """The current instant, with the machine's local UTC offset."""
        ns = time.time_ns()
        off = datetime.now().astimezone().utcoffset() or timedelta(0)
        return cls(ns, int(off.total_seconds()))

    @classmethod
    def coerce(cls, value: "Timestamp | datetime | str | int | float | None", *,
               field: str = "timestamp") -> "Timestamp":
        """Accept the shapes callers hand in; None means now."""
        if value is None:
            return cls.now()
        if isinstance(value, Timestamp):
            return value
        if isinstance(value, datetime):
            return cls.from_datetime(value)
        if isinstance(value, str):
            return cls.parse(value, field=field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls.from_unix(value)
        raise FormatError(f"{field}: cannot use {type(value).__name__} as a timestamp")

    # -- views --------------------------------------------------------------------------
    def _local_parts(self) -> tuple[datetime, int, int]:
        """The wall-clock time as a naive datetime, its nanoseconds, and the years to take
        off the datetime's year (400 for a time in year 0, else 0)."""
        local_ns = self.ns + self.offset * 1_000_000_000
        secs, frac = divmod(local_ns, 1_000_000_000)
        back = _CYCLE_YEARS if secs < _LOCAL_MIN_S + 366 * 86_400 else 0
        return (_EPOCH.replace(tzinfo=None) + timedelta(seconds=secs + (_CYCLE_S if back else 0)),
                frac, back)

    def isoformat(self) -> str:
        """RFC 3339 exactly as Go's RFC3339Nano writes it (fraction trimmed, 'Z' for UTC)."""
        if self._iso is None:   # immutable, so the text is computed once
            object.__setattr__(self, "_iso", self._format())
        return self._iso

    def _format(self) -> str:
        dt, frac, back = self._local_parts()
        text = (f"{dt.year - back:04d}-{dt.month:02d}-{dt.day:02d}"
                f"T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}")
        if frac:
            text += "." + f"{frac:09d}".rstrip("0")
        if self.offset == 0:
            return text + "Z"
        sign = "+" if self.offset > 0 else "-"
        oh, om = divmod(abs(self.offset) // 60, 60)
        return f"{text}{sign}{oh:02d}:{om:02d}"

    def strftime(self, fmt: str) -> str:
        """Format the wall-clock time in the stored offset (seconds resolution). ``%Y`` is
        always four digits (C strftime prints year 1 as ``1``; Go's zero time is year 1)."""
        dt, _frac, back = self._local_parts()
        if "%Y" in fmt:
            fmt = (fmt.replace("%%", "\0").replace("%Y", f"{dt.year - back:04d}")
                   .replace("\0", "%%"))
        return dt.strftime(fmt)

    def seconds_nanos(self) -> tuple[int, int]:
        """(whole seconds since the epoch, nanoseconds 0..999999999): both fit an int64 for
        every time Go can write (years 1..9999), unlike ``ns`` itself."""
        return divmod(self.ns, 1_000_000_000)

    @classmethod
    def from_seconds_nanos(cls, seconds: int, nanos: int, offset: int = 0) -> "Timestamp":
        return cls(int(seconds) * 1_000_000_000 + int(nanos), int(offset))

    def to_datetime(self) -> datetime:
        """An aware datetime (microseconds: lossy, for display and arithmetic only); a time
        in year 0 is a FormatError (datetime starts at year 1)."""
        dt, frac, back = self._local_parts()
        if back:
            raise FormatError(f"{self.isoformat()}: year 0 has no datetime")
        return (dt + timedelta(microseconds=frac // 1000)).replace(
            tzinfo=timezone(timedelta(seconds=self.offset)))

    def unix(self) -> float:
        return self.ns / 1e9

    # -- protocol -----------------------------------------------------------------------
    def __str__(self) -> str:
        return self.isoformat()

    def __repr__(self) -> str:
        return f"Timestamp({self.isoformat()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timestamp):
            return NotImplemented
        return self.ns == other.ns and self.offset == other.offset

    def __lt__(self, other: "Timestamp") -> bool:
        if not isinstance(other, Timestamp):
            return NotImplemented
        return (self.ns, self.offset) < (other.ns, other.offset)

    def __hash__(self) -> int:
        return hash((self.ns, self.offset))

    def __reduce__(self):  # picklable despite __setattr__
        return (Timestamp, (self.ns, self.offset))
