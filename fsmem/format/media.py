"""Recognise media by content and read image dimensions from headers (no decoding)."""

from __future__ import annotations

import struct

__all__ = ["sniff_mime", "image_size", "modality_of", "extension_for"]

_EXT = {
    "text/plain": ".txt", "text/markdown": ".md", "application/json": ".json",
    "image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
    "audio/wav": ".wav", "audio/x-wav": ".wav", "audio/mpeg": ".mp3", "audio/ogg": ".ogg",
    "video/mp4": ".mp4", "application/pdf": ".pdf", "audio/amr": ".amr",
    "audio/amr-wb": ".awb", "audio/mp4": ".m4a",
}


_AUDIO_BRANDS = (b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B ")


def extension_for(mime: str) -> str:
    """The file extension a block of this MIME type gets ('' when unknown): a pure function."""
    return _EXT.get(mime.split(";", 1)[0].strip().lower(), "")


def modality_of(mime: str) -> str:
    """text | image | audio | video | file, from the MIME type."""
    major = mime.split("/", 1)[0].lower()
    if major in ("text", "image", "audio", "video"):
        return major
    return "file"


def sniff_mime(head: bytes) -> str | None:
    """The MIME type of a media file recognised from its first bytes, else None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0
                                   and head[1] & 0x06 != 0):
        return "audio/mpeg"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"#!AMR\n"):
        return "audio/amr"
    if head.startswith(b"#!AMR-WB\n"):
        return "audio/amr-wb"
    if head[4:8] == b"ftyp":   # ISO media: the major brand says audio-only (m4a) or not
        return "audio/mp4" if head[8:12] in _AUDIO_BRANDS else "video/mp4"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    return None


def image_size(data: bytes, mime: str) -> tuple[int, int] | None:
    """(width, height) read from the header of a PNG, GIF, JPEG or WebP; None if unknown."""
    try:
        if mime == "image/png" and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if mime == "image/gif":
            return struct.unpack("<HH", data[6:10])
        if mime == "image/jpeg":
            return _jpeg_size(data)
        if mime == "image/webp":
            return _webp_size(data)
    except struct.error:
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None
