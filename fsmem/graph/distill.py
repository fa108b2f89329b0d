"""Distillers: text in, knowledge-graph triples out (the L2 -> L3 compute step).

A distiller only reads text and returns ``Triple``s; it never touches the store. ``unit_texts``
decides which text it sees: the original text blocks of a unit, after the plugin declarations
(no_memory sources are left out, cleaners apply); ``stablemem`` decides where triples go.

Two distillers ship: ``RuleDistiller`` (default: offline, deterministic; regular patterns for
common Chinese and English statements) and ``LLMDistiller`` (an OpenAI-compatible chat
endpoint named by configuration, spoken to with the standard library only).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, runtime_checkable

import msgspec

from fsmem.format.blocks import hash_bytes
from fsmem.format.errors import FsmemError

if TYPE_CHECKING:
    from fsmem.format.plugins import Plugins
    from fsmem.format.views import Document

__all__ = [
    "Triple", "Distiller", "RuleDistiller", "LLMDistiller", "DistillError", "Score",
    "evaluate", "load_cases", "TextPiece", "unit_texts",
]

log = logging.getLogger("fsmem.distill")


class DistillError(FsmemError):
    """A distiller could not produce triples (endpoint down, timeout, malformed reply)."""


class Triple(msgspec.Struct, frozen=True):
    """(subject)-[relation]->(object), the SDK's Triple; names are node texts, not ids."""

    subject: str
    relation: str
    object: str
    subject_type: str = "Concept"
    object_type: str = "Concept"
    confidence: float = 1.0
    sentence_text: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.subject, self.relation, self.object)


@runtime_checkable
class Distiller(Protocol):
    """What the distillation flow calls: one piece of text in, its triples out."""

    name: str

    def extract(self, text: str, *, source: str = "") -> list[Triple]: ...


# -- what a distiller reads --------------------------------------------------------------

@dataclass(frozen=True)
class TextPiece:
    """One text block of one event, as the distiller sees it (compute-layer text)."""

    event_id: str
    turn: int          # index of the event in its unit
    block: str         # the block id in graph.db (fsmem: its BLAKE3 digest)
    role: str
    text: str
    source: str = ""


class HasPlugins(Protocol):
    """What a text source reads of the memory (a ``Reader`` or ``Memory`` is one)."""

    plugins: "Plugins"


def unit_texts(mem: HasPlugins, doc: "Document") -> list[TextPiece]:
    """The compute-layer text of every text block of a unit, read from the original blocks
    (never a rendered view): no_memory sources give '', cleaners apply (premise F).

    This is the per-unit text source; another source (a legacy HomeAgent document) only has to
    return the same ``TextPiece`` list.
    """
    pieces: list[TextPiece] = []
    for turn, ev in enumerate(doc.events):
        seen: set[tuple[str, str]] = set()
        by_role = {r.role: r.digest for r in ev.blocks if r.modality == "text"}
        items = [(by_role.get("input"), "input", mem.plugins.source_text(ev.source, ev.input)),
                 (by_role.get("response"), "response",
                  mem.plugins.source_text(ev.source, ev.response))]
        items += [(hash_bytes(tr.output.encode()), "tool_output",
                   mem.plugins.tool_text(ev.source, tr.name, tr.output)) for tr in ev.tool_results]
        for digest, role, text in items:
            if digest and text.strip() and (digest, text) not in seen:
                seen.add((digest, text))
                pieces.append(TextPiece(event_id=ev.id, turn=turn, block=digest, role=role,
                                        text=text, source=ev.source))
    return pieces


# -- the rule distiller -------------------------------------------------------------------
#
# Conventions (docs/STABLEMEM.md): first person stays as spoken ("我" in Chinese, "I" in
# English, possessives like "my sister" / "我妹妹" stay whole); English articles are dropped
# from endpoints; relations are a small fixed vocabulary per language; a clause that is a
# question, negated, hedged or conditional yields nothing.

_ZH_END = r"[了啊呀哦呢吧哈嘛啦哟呐~～\s]*"
_ZH_ADV_WORDS = ("现在|目前|一直|也|都|还|就|平时|已经|从小|特别|非常|很|真的|最近|最|仍然|依然|"
                 "本来|一般|常常|经常|总是|上个月|这个月|今年|去年|刚刚|刚|仍|只|才|正|即")
_ZH_ADV = f"(?:{_ZH_ADV_WORDS})*"
_ZH_S = r"(?P<s>[^，,。的]{1,12}?)"
_ZH_S_OF = r"(?P<s>.{1,14}?)"                 # subjects that may hold 的 ("老张的女儿")
_ZH_Q = r"(?:[一二两三四五六七八九十几\d]+(?:只|条|头|匹|个|尾|辆|台|套|本|位|家|间|部|件|把|双|座|名|种|款))"
_ZH_A = r"(?:一(?:名|个|位|只|家|座|种|款|辆|条|本|部|所|台))"   # the indefinite article
_ZH_FILLERS = ("顺便说一下", "我跟你说", "请记住", "告诉你", "其实", "另外", "对了", "顺便", "后来",
               "记住", "记得", "话说", "然后", "而且", "并且", "但是", "可是", "不过", "还有",
               "所以", "因为", "但", "嗯", "哦", "对")
_ZH_SKIP = re.compile(r"不|没|别|未|无法|并非|吗|什么|谁|哪|几|多少|怎么|为什么|是否|"
                      r"可能|也许|大概|或许|好像|似乎|如果|假如|要是|估计|应该|听说|据说|"
                      r"觉得|以为|希望|想要|打算|帮我|请|麻烦|给我|"
                      r"以前|之前|曾经|原来|过去")   # past states are not current facts
_ZH_NOT_SUBJ = frozenset(
    "这 那 这个 那个 这里 那里 它 他 她 他们 她们 它们 我们 你 您 你们 谁 什么 大家 有人 人家 "
    "自己 今天 明天 昨天 现在 今年 明年 去年 刚才 最近 周末 早上 晚上 下午 上午 中午 天气 "
    "而 且 就 也 但 即 还 都 只 又 才 并 或 则 便 本文 本章 这里".split())
# Markup, code and arrows: such a clause is not a plain statement (tool output, documents).
_NOT_PROSE = re.compile(r"[=<>{}\[\]|`$#*⇒→←\\/@](?![\w.-]*\.[a-z]{2,})|https?:")
_MAX_CLAUSE = 120
_ZH_VERB_START = re.compile(f"^{_ZH_ADV}" + r"(?:住|搬|喜欢|爱|迷上|是|在|来自|养|有|会|"
                            r"讨厌|擅长|对|毕业|出生|生于|位于|叫|热爱|精通)")

_EN_PRON = frozenset("it this that there these those they he she you who what which here "
                     "everyone someone somebody nobody one everybody anyone today tomorrow "
                     "yesterday tonight now".split())
_EN_SKIP = re.compile(
    r"\b(?:not|no|never|nobody|nothing|neither|nor|maybe|perhaps|probably|possibly|might|may|"
    r"could|would|should|if|whether|unless|think|guess|suppose|believe|wonder|hope|want|wants|"
    r"wish|seems?|apparently|please|let's)\b|n't\b", re.I)
_EN_QUESTION = re.compile(r"^(?:who|what|where|when|why|how|which|do|does|did|is|are|am|was|"
                          r"were|can|will|shall|have|has)\b", re.I)
_EN_FILLERS = re.compile(r"^(?:so|well|also|btw|by the way|actually|just so you know|fyi|"
                         r"remember that|note that|oh|and|but|ok|okay)\b[\s,]*", re.I)
_EN_ADV = r"(?:(?:also|still|now|currently|really|actually|usually|often|always|just)\s+)*"
_EN_S = r"(?P<s>(?:[\w'-]+\s+){0,3}?[\w'-]+)"
_EN_VERBS = (r"live|lives|moved|work|works|like|likes|love|loves|enjoy|enjoys|hate|hates|"
             r"dislike|dislikes|prefer|prefers|speak|speaks|study|studies|have|has|own|owns|"
             r"am|is|was|come|comes|graduated")
_EN_AND_VERB = re.compile(r"\s+and\s+(?=(?:also\s+)?(?:" + _EN_VERBS + r")\b|(?:my|our)\s+\w+\s+(?:"
                          + _EN_VERBS + r")\b|[A-Z]\w*\s+(?:" + _EN_VERBS + r")\b)")
_EN_IDIOMS = ((re.compile(r"\b(?:can't|cannot|can not)\s+stand\b", re.I), "hates"),
              (re.compile(r"\bI'm\b", re.I), "I am"), (re.compile(r"\bI've\b", re.I), "I have"),
              (re.compile(r"\bwe're\b", re.I), "we are"))
_ABBREV = re.compile(r"(?:^|[^\w.])(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|vs|etc|e\.g|i\.e)\.$", re.I)
_EN_TIME_TAIL = re.compile(
    r"\s+(?:(?:last|this|next)\s+(?:year|month|week|summer|winter|spring|autumn|fall)|"
    r"now|today|yesterday|recently|currently|ago|\d+\s+(?:years?|months?)\s+ago)$", re.I)


@dataclass(frozen=True)
class _Rule:
    """One statement pattern: a regex with groups ``s`` and ``o`` (and optional ``r``/``n``)."""

    name: str
    pattern: re.Pattern[str]
    relation: str | Callable[[re.Match[str]], str]
    subject_type: str = "Concept"
    object_type: str = "Concept"
    confidence: float = 0.8
    split_objects: bool = False
    first_person: str = ""        # subject forced to this (e.g. "my X is Y" -> "I")
    needs_proper: bool = False    # generic "is": the object must be a class or a name


def _zh(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + pattern + _ZH_END + "$")


def _en(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + pattern + "$", re.I)


_ZH_O = r"(?P<o>.+?)"
_ZH_RULES: tuple[_Rule, ...] = (
    _Rule("zh-fav", _zh(_ZH_S + r"(?P<r>最?(?:喜欢|爱)(?:吃|喝|看|听|玩|用)?的[^的是]{1,8}?)是" + _ZH_A + "?" + _ZH_O),
          lambda m: m["r"], "Person"),
    _Rule("zh-of-is-a", _zh(r"(?P<s>[^，,。的]{1,12}?的[^的是]{1,8}?)是" + _ZH_A + _ZH_O), "是",
          confidence=0.7),
    _Rule("zh-of-is", _zh(_ZH_S + r"的(?P<r>[^的是]{1,8}?)是" + _ZH_O), lambda m: m["r"]),
    _Rule("zh-keep", _zh(_ZH_S + _ZH_ADV + r"养了?" + _ZH_Q + r"?(?:叫(?P<n>[^的]{1,8})的)?" + _ZH_O),
          "养", "Person", "Animal", split_objects=True),
    _Rule("zh-name", _zh(_ZH_S_OF + r"(?:的名字)?(?:名)?叫(?:做)?(?!了|过|着)" + _ZH_O), "名字",
          object_type="Person"),
    _Rule("zh-home", _zh(_ZH_S + r"家" + _ZH_ADV + r"在" + _ZH_O), "住在", "Person", "Place"),
    _Rule("zh-live", _zh(_ZH_S_OF + _ZH_ADV + r"(?:居住在|生活在|住在|搬到了?|搬去了?|住)" + _ZH_O), "住在",
          "Person", "Place"),
    _Rule("zh-work", _zh(_ZH_S + _ZH_ADV + r"在" + _ZH_O + r"(?:工作|上班|任职)"), "工作于",
          "Person", "Organization"),
    _Rule("zh-study", _zh(_ZH_S + _ZH_ADV + r"在" + _ZH_O + r"(?:上学|读书|念书|读大学|上大学)"),
          "就读于", "Person", "Organization"),
    _Rule("zh-from", _zh(_ZH_S + _ZH_ADV + r"来自" + _ZH_O), "来自", "Person", "Place"),
    _Rule("zh-born", _zh(_ZH_S + _ZH_ADV + r"(?:出生于|出生在|生于)" + _ZH_O), "出生于", "Person"),
    _Rule("zh-grad", _zh(_ZH_S + _ZH_ADV + r"毕业于" + _ZH_O), "毕业于", "Person", "Organization"),
    _Rule("zh-located", _zh(_ZH_S + _ZH_ADV + r"(?:位于|坐落于|坐落在)" + _ZH_O), "位于",
          "Place", "Place"),
    _Rule("zh-allergy", _zh(_ZH_S + _ZH_ADV + r"对" + _ZH_O + r"过敏"), "过敏", "Person"),
    _Rule("zh-dislike", _zh(_ZH_S + _ZH_ADV + r"(?:讨厌|厌恶|受不了)" + _ZH_O), "讨厌", "Person",
          split_objects=True),
    _Rule("zh-good-at", _zh(_ZH_S + _ZH_ADV + r"(?:擅长|精通)" + _ZH_O), "擅长", "Person",
          split_objects=True),
    _Rule("zh-speak", _zh(_ZH_S + _ZH_ADV + r"会(?:说|讲)" + _ZH_O), "会说", "Person",
          split_objects=True),
    _Rule("zh-like", _zh(_ZH_S + _ZH_ADV + r"(?P<r>喜欢|热爱|迷上了?|爱)" + _ZH_O),
          lambda m: "爱" if m["r"] in ("爱", "热爱") else "喜欢", "Person", split_objects=True),
    _Rule("zh-have", _zh(_ZH_S + _ZH_ADV + r"有" + _ZH_Q + _ZH_O), "有", "Person",
          split_objects=True),
    _Rule("zh-is", _zh(_ZH_S + _ZH_ADV + r"是" + _ZH_A + "?" + _ZH_O), "是", confidence=0.6),
)

_EN_O = r"(?P<o>.+?)"
_EN_ART = r"(?:(?:a|an|the)\s+)?"
_LIKE = {"like": "likes", "enjoy": "likes", "love": "loves", "adore": "loves",
         "prefer": "prefers", "hate": "dislikes", "dislike": "dislikes"}
_EN_RULES: tuple[_Rule, ...] = (
    _Rule("en-live", _en(_EN_S + r"\s+" + _EN_ADV + r"(?:live|lives|moved|relocated)\s+(?:in|to|at)\s+"
                         + _EN_O), "lives in", "Person", "Place"),
    _Rule("en-work-as", _en(_EN_S + r"\s+" + _EN_ADV + r"(?:work|works)\s+as\s+" + _EN_ART + _EN_O),
          "works as", "Person"),
    _Rule("en-work", _en(_EN_S + r"\s+" + _EN_ADV + r"(?:work|works)\s+(?:at|for)\s+" + _EN_O),
          "works at", "Person", "Organization"),
    _Rule("en-born", _en(_EN_S + r"\s+(?:was|were)\s+born\s+in\s+" + _EN_O), "born in", "Person",
          "Place"),
    _Rule("en-from", _en(_EN_S + r"\s+" + _EN_ADV + r"(?:(?:am|is|are)\s+from|comes?\s+from)\s+"
                         + _EN_O), "from", "Person", "Place"),
    _Rule("en-allergic", _en(_EN_S + r"\s+(?:am|is|are)\s+allergic\s+to\s+" + _EN_O), "allergic to",
          "Person", split_objects=True),
    _Rule("en-located", _en(_EN_S + r"\s+(?:is|are)\s+(?:located|situated|based)\s+in\s+" + _EN_O),
          "located in", object_type="Place"),
    _Rule("en-study", _en(_EN_S + r"\s+" + _EN_ADV + r"(?:study|studies|studied)\s+at\s+" + _EN_O),
          "studies at", "Person", "Organization"),
    _Rule("en-grad", _en(_EN_S + r"\s+graduated\s+from\s+" + _EN_O), "graduated from", "Person",
          "Organization"),
    _Rule("en-married", _en(_EN_S + r"\s+(?:am|is|are)\s+married\s+to\s+" + _EN_O), "married to",
          "Person", "Person"),
    _Rule("en-named", _en(_EN_S + r"\s+(?:am|is)\s+(?:called|named)\s+" + _EN_O), "name",
          object_type="Person"),
    _Rule("en-speak", _en(_EN_S + r"\s+" + _EN_ADV + r"(?:speak|speaks)\s+" + _EN_O), "speaks",
          "Person", split_objects=True),
    _Rule("en-like", _en(_EN_S + r"\s+" + _EN_ADV + r"(?P<r>like|enjoy|love|adore|prefer|hate|dislike)s?\s+"
                         + _EN_O), lambda m: _LIKE[m["r"].lower()], "Person", split_objects=True),
    _Rule("en-have-named", _en(_EN_S + r"\s+(?:have|has|own|owns)\s+(?:a|an|one|\d+)\s+[\w-]+\s+"
                               r"(?:named|called)\s+" + _EN_O), "has", "Person", "Animal"),
    _Rule("en-have", _en(_EN_S + r"\s+(?:have|has|own|owns)\s+(?:a|an|one|two|three|four|\d+)\s+"
                         + _EN_O), "has", "Person", split_objects=True),
    _Rule("en-the-of", _en(r"the\s+(?P<r>\w+(?:\s+\w+)?)\s+of\s+(?P<s>[\w\s'-]{1,40}?)\s+(?:is|are)\s+"
                           r"(?!an?\s)" + _EN_O), lambda m: m["r"].lower()),
    _Rule("en-poss-is-a", _en(r"(?P<s>(?:(?:my|our)\s+)?[\w-]+(?:\s+[\w-]+){0,2}?'s\s+[\w\s-]{1,30}?)\s+"
                              r"(?:is|are|was)\s+(?:a|an)\s+" + _EN_O), "is", confidence=0.7),
    _Rule("en-poss", _en(r"(?P<s>(?:(?:my|our)\s+)?[\w-]+(?:\s+[\w-]+){0,2}?)'s\s+(?P<r>[\w\s-]{1,30}?)\s+"
                         r"(?:is|are|was)\s+" + _EN_O), lambda m: m["r"].lower()),
    _Rule("en-my-is-a", _en(r"(?P<s>(?:my|our)\s+[\w\s-]{1,30}?)\s+(?:is|are)\s+(?:a|an)\s+" + _EN_O),
          "is", confidence=0.7),
    _Rule("en-my", _en(r"my\s+(?P<r>[\w\s-]{1,30}?)\s+(?:is|are)\s+" + _EN_O),
          lambda m: m["r"].lower(), "Person", first_person="I"),
    _Rule("en-our", _en(r"our\s+(?P<r>[\w\s-]{1,30}?)\s+(?:is|are)\s+" + _EN_O),
          lambda m: m["r"].lower(), "Person", first_person="we"),
    _Rule("en-is", _en(_EN_S + r"\s+(?:is|am|are)\s+" + _EN_O), "is", confidence=0.6,
          needs_proper=True),
)


def _sentences(text: str) -> Iterable[tuple[str, bool]]:
    """(sentence, is_question): split on CJK/ASCII terminators; '.' only before a space/end."""
    start = 0
    for m in re.finditer(r"[。！？!?；;\n]+|\.(?=\s|$)", text):
        if m.group() == "." and _ABBREV.search(text[max(0, m.start() - 6):m.end()]):
            continue  # "Ms. Rivera": an abbreviation, not the end of a sentence
        chunk = text[start:m.start()].strip()
        if chunk:
            yield chunk, ("？" in m.group() or "?" in m.group())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        yield tail, False


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _strip_zh_fillers(clause: str) -> str:
    changed = True
    while changed:
        changed = False
        for f in _ZH_FILLERS:
            if clause.startswith(f) and len(clause) > len(f):
                clause = clause[len(f):].lstrip("，, ")
                changed = True
    return clause


def _split_list(obj: str, zh: bool) -> list[str]:
    parts = re.split(r"和|、|以及|还有" if zh else r",\s*(?:and\s+)?|\s+and\s+|\s*&\s*", obj)
    return [p for p in (x.strip() for x in parts) if p]


class RuleDistiller:
    """Offline, deterministic triples from common Chinese and English statement patterns.

    Precision over recall: a clause yields at most one rule's triples, and any clause that is a
    question, negated, hedged, conditional or a request yields nothing (docs/STABLEMEM.md).
    """

    name = "rules-v1"

    def __init__(self, *, max_text: int = 200_000) -> None:
        # Rules are linear per clause; the cap only bounds pathological tool outputs.
        self.max_text = max_text

    def extract(self, text: str, *, source: str = "") -> list[Triple]:
        out: list[Triple] = []
        seen: set[tuple[str, str, str]] = set()
        for sentence, question in _sentences(text[: self.max_text]):
            if question:
                continue
            for t in self._sentence(sentence):
                if t.key not in seen:
                    seen.add(t.key)
                    out.append(t)
        return out

    def _sentence(self, sentence: str) -> list[Triple]:
        zh = _is_cjk(sentence)
        if zh:
            clauses = [c.strip() for c in re.split(r"[，,：:]", sentence)]
        else:
            sentence = re.sub(r"[’‘]", "'", sentence)
            for pattern, replacement in _EN_IDIOMS:
                sentence = pattern.sub(replacement, sentence)
            clauses = [c for part in re.split(r",\s+(?:but\s+)?|;\s*|\s+but\s+", sentence)
                       for c in _EN_AND_VERB.split(part)]
        out: list[Triple] = []
        carried = ""
        for clause in clauses:
            clause = _strip_zh_fillers(clause) if zh else _EN_FILLERS.sub("", clause.strip())
            clause = clause.strip(" \t\"'“”「」（）()")
            if not clause or len(clause) > _MAX_CLAUSE or _NOT_PROSE.search(clause):
                carried = ""
                continue
            if zh and _ZH_SKIP.search(clause) or not zh and (_EN_SKIP.search(clause)
                                                             or _EN_QUESTION.match(clause)):
                carried = ""
                continue
            triples = []
            if carried and self._verb_first(clause, zh):
                triples = self._clause(carried + ("" if zh else " ") + clause, zh)
            if not triples:
                triples = self._clause(clause, zh)
            if triples:
                carried = triples[0].subject if zh else self._surface(triples[0].subject)
                out.extend(triples)
        return out

    @staticmethod
    def _verb_first(clause: str, zh: bool) -> bool:
        if zh:
            return bool(_ZH_VERB_START.match(clause))
        return bool(re.match(r"(?:also\s+)?(?:" + _EN_VERBS + r")\b", clause, re.I))

    @staticmethod
    def _surface(subject: str) -> str:
        return subject  # "I", "my sister", "Bob": already a valid English subject

    def _clause(self, clause: str, zh: bool) -> list[Triple]:
        for rule in _ZH_RULES if zh else _EN_RULES:
            m = rule.pattern.match(clause)
            if not m:
                continue
            triples = self._build(rule, m, zh)
            if triples:
                return triples
        return []

    def _build(self, rule: _Rule, m: re.Match[str], zh: bool) -> list[Triple]:
        subject = rule.first_person or self._subject(m["s"], zh)
        relation = rule.relation(m) if callable(rule.relation) else rule.relation
        relation = relation.strip()
        if re.search(r"\s", relation) if zh else not re.fullmatch(r"[\w' -]+", relation):
            return []
        raw_obj = m.groupdict().get("n") or m["o"]
        if not subject or not relation or not raw_obj:
            return []
        if rule.needs_proper and not self._classy(raw_obj):
            return []
        objects = _split_list(raw_obj, zh) if rule.split_objects else [raw_obj]
        out = []
        s_type = "Person" if subject in ("我", "I", "we") else rule.subject_type
        for obj in objects:
            obj = self._object(obj, zh)
            if obj and obj != subject:
                out.append(Triple(subject, relation, obj, s_type, rule.object_type,
                                  rule.confidence))
        return out

    @staticmethod
    def _subject(s: str, zh: bool) -> str:
        s = s.strip(" ，,")
        if zh:
            if s in _ZH_NOT_SUBJ or len(s) > 12 or not s or s.isdigit() \
                    or re.search(r"[^\w\u4e00-\u9fff]", s):
                return ""
            return s
        words = s.split()
        if not words or len(words) > 5:
            return ""
        if words[0].lower() in ("the", "a", "an"):
            words = words[1:]
        if not words or words[0].lower() in _EN_PRON:
            return ""
        if len(words) == 1 and words[0].lower() in ("i", "me"):
            return "I"
        if len(words) == 1 and words[0].lower() in ("we", "us"):
            return "we"
        if words[0].lower() in ("my", "our"):
            words[0] = words[0].lower()
        elif not words[0][:1].isupper():
            return ""  # a lower-case subject is a fragment, not a named thing
        return " ".join(words)

    @staticmethod
    def _classy(obj: str) -> bool:
        """Generic "X is Y" only for a class ("a doctor") or a name ("Paris")."""
        first = obj.split()[0] if obj.split() else ""
        return first.lower() in ("a", "an", "the") or first[:1].isupper()

    @staticmethod
    def _object(obj: str, zh: bool) -> str:
        obj = obj.strip(" ，,。.!！\"'“”")
        if zh:
            obj = re.sub(r"^(?:" + _ZH_A + r"|" + _ZH_Q + r")", "", obj)
            obj = re.sub(_ZH_END + "$", "", obj)
            if not obj or len(obj) > 20 or obj.endswith("的") or obj[0] in "了过着得":
                return ""
            return obj
        obj = _EN_TIME_TAIL.sub("", obj)
        obj = re.sub(r"^(?:to\s+)?(?:a|an|the)\s+", "", obj, flags=re.I)
        obj = re.sub(r"^to\s+", "", obj, flags=re.I)
        if not obj or len(obj.split()) > 6 or len(obj) > 60 or obj.lower() in _EN_PRON:
            return ""
        return obj


# -- the LLM distiller --------------------------------------------------------------------

_PROMPT = """You extract durable facts from a user's memory as knowledge-graph triples.
Return ONLY a JSON object: {"triples": [{"subject": "...", "relation": "...", "object": "...",
"subject_type": "Person|Animal|Place|Organization|Concept|Time", "object_type": "...",
"confidence": 0.0-1.0}]}.
Rules: only facts the text states; nothing from questions, requests, negations, guesses or
conditions; keep names and relations in the language of the text; short node names (a name,
a thing, a place), not clauses; {"triples": []} when there is no fact."""


@dataclass
class LLMDistiller:
    """Triples from an OpenAI-compatible ``/chat/completions`` endpoint (stdlib HTTP only).

    Configuration: arguments, else ``FSMEM_LLM_BASE_URL`` / ``FSMEM_LLM_MODEL`` /
    ``FSMEM_LLM_API_KEY`` (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` as fallbacks). Every
    failure is a ``DistillError`` naming the endpoint; nothing is retried silently.
    """

    base_url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)
    timeout: float = 60.0
    max_reply_bytes: int = 4 << 20
    name: str = field(init=False, default="")

    def __post_init__(self) -> None:
        env = os.environ
        self.base_url = (self.base_url or env.get("FSMEM_LLM_BASE_URL")
                         or env.get("OPENAI_BASE_URL") or "").rstrip("/")
        self.model = self.model or env.get("FSMEM_LLM_MODEL", "")
        self.api_key = self.api_key or env.get("FSMEM_LLM_API_KEY") or env.get("OPENAI_API_KEY", "")
        if not self.base_url:
            raise DistillError("LLM distiller: no endpoint (pass base_url or set FSMEM_LLM_BASE_URL)")
        if not self.model:
            raise DistillError(f"LLM distiller {self.base_url}: no model (pass model or set "
                               "FSMEM_LLM_MODEL)")
        parsed = urllib.parse.urlsplit(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise DistillError(f"LLM distiller: base_url {self.base_url!r} is not an http(s) URL")
        self.url = self.base_url if self.base_url.endswith("/chat/completions") \
            else self.base_url + "/chat/completions"
        self.name = f"llm:{self.model}"
        # A loopback endpoint never goes through a proxy from the environment.
        handlers = [urllib.request.ProxyHandler({})] if parsed.hostname in (
            "127.0.0.1", "localhost", "::1") else []
        self._opener = urllib.request.build_opener(*handlers)

    def extract(self, text: str, *, source: str = "") -> list[Triple]:
        if not text.strip():
            return []
        body = json.dumps({"model": self.model, "temperature": 0,
                           "messages": [{"role": "system", "content": _PROMPT},
                                        {"role": "user", "content": text}]}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        raw = self._post(body, headers)
        return self._parse(raw, text)

    def _post(self, body: bytes, headers: dict[str, str]) -> bytes:
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read(self.max_reply_bytes + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace")
            raise DistillError(f"LLM endpoint {self.url}: HTTP {exc.code} {exc.reason}: "
                               f"{detail.strip()[:200]}") from exc
        except (TimeoutError, socket.timeout) as exc:
            raise DistillError(f"LLM endpoint {self.url}: no reply within {self.timeout:g}s "
                               "(timed out)") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise DistillError(f"LLM endpoint {self.url}: no reply within {self.timeout:g}s "
                                   "(timed out)") from exc
            raise DistillError(f"LLM endpoint {self.url}: cannot connect: {exc.reason}") from exc
        except OSError as exc:
            raise DistillError(f"LLM endpoint {self.url}: {exc}") from exc
        if len(raw) > self.max_reply_bytes:
            raise DistillError(f"LLM endpoint {self.url}: reply larger than "
                               f"{self.max_reply_bytes} bytes")
        return raw

    def _parse(self, raw: bytes, text: str) -> list[Triple]:
        def bad(why: str) -> DistillError:
            head = raw[:160].decode("utf-8", "replace")
            return DistillError(f"LLM endpoint {self.url}: malformed reply ({why}): {head!r}")
        try:
            reply = json.loads(raw)
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise bad("not an OpenAI chat completion") from exc
        if not isinstance(content, str):
            raise bad("message content is not text")
        content = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", content.strip())
        try:
            data = json.loads(content)
        except ValueError as exc:
            raise bad("message content is not JSON") from exc
        items = data.get("triples") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise bad("no 'triples' list")
        return [self._triple(item, bad) for item in items]

    @staticmethod
    def _triple(item: object, bad: Callable[[str], DistillError]) -> Triple:
        if not isinstance(item, dict):
            raise bad(f"triple is {type(item).__name__}, not an object")
        names = []
        for key in ("subject", "relation", "object"):
            value = item.get(key)
            if not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise bad(f"triple field {key!r} missing, empty or too long")
            names.append(value.strip())
        types = []
        for key in ("subject_type", "object_type"):
            value = item.get(key) or "Concept"
            if not isinstance(value, str):
                raise bad(f"triple field {key!r} is not text")
            types.append(value.strip()[:40] or "Concept")
        conf = item.get("confidence", 0.8)
        if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0 <= conf <= 1:
            raise bad("triple confidence is not a number in [0, 1]")
        return Triple(names[0], names[1], names[2], types[0], types[1], float(conf))


# -- evaluation ---------------------------------------------------------------------------

class Score(msgspec.Struct, kw_only=True):
    """Precision and recall of a distiller on a labelled set (exact subject/relation/object)."""

    cases: int
    expected: int
    predicted: int
    correct: int
    precision: float
    recall: float
    misses: list[str] = []
    extras: list[str] = []


def load_cases(path: str) -> list[dict]:
    """Labelled sentences, one JSON object a line: ``{"id", "lang", "text", "triples"}``."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def evaluate(distiller: Distiller, cases: list[dict]) -> Score:
    expected = predicted = correct = 0
    misses, extras = [], []
    for case in cases:
        want = {tuple(t) for t in case["triples"]}
        got = {t.key for t in distiller.extract(case["text"], source="eval")}
        expected += len(want)
        predicted += len(got)
        correct += len(want & got)
        misses += [f"{case['id']}: {list(t)}" for t in sorted(want - got)]
        extras += [f"{case['id']}: {list(t)}" for t in sorted(got - want)]
    return Score(cases=len(cases), expected=expected, predicted=predicted, correct=correct,
                 precision=correct / predicted if predicted else 1.0,
                 recall=correct / expected if expected else 1.0, misses=misses, extras=extras)
