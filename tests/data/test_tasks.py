import json

import pytest

from minitransformer.data.tasks import TASKS, make_task, normalize, tokenizer_from_dict
from minitransformer.data.vocab import BOS, EOS, PAD, Vocab
from minitransformer.errors import ConfigError

SMALL = dict(n_train=2_000, n_valid=200, n_test=200)


@pytest.mark.parametrize("name", ["copy", "reverse", "sort"])
def test_sequence_tasks_are_reproducible_and_held_out_is_unseen(name):
    a = make_task(name, seed=3, **SMALL)
    assert a.splits == make_task(name, seed=3, **SMALL).splits
    assert a.splits["train"] != make_task(name, seed=4, **SMALL).splits["train"]
    train = {tuple(s) for s, _ in a.splits["train"]}
    valid = {tuple(s) for s, _ in a.splits["valid"]}
    test = {tuple(s) for s, _ in a.splits["test"]}
    assert len(test) == 200 and len(valid) == 200
    assert not (test & train) and not (valid & train) and not (test & valid)
    for s, t in a.splits["train"][:50] + a.splits["test"][:50]:
        assert 1 <= len(s) <= 10 and min(s) >= 4 and {PAD, BOS, EOS}.isdisjoint(s + t)
        expected = {"copy": s, "reverse": s[::-1], "sort": sorted(s)}[name]
        assert t == expected
    assert a.max_len == 11 and a.vocab_size == 24


def test_sequence_knobs_and_text():
    task = make_task("reverse", seed=0, n_symbols=5, min_len=4, max_len=6, n_train=100,
                     n_valid=10, n_test=10)  # fmt: skip
    assert task.vocab_size == 9
    assert all(4 <= len(s) <= 6 for v in task.splits.values() for s, _ in v)
    src, tgt = task.splits["test"][0]
    assert task.detokenize(tgt) == task.references("test")[0]
    assert task.sources("test")[0].split()[::-1] == task.references("test")[0].split()
    assert make_task(**task.knobs).splits == task.splits


def test_errors_list_valid_names_and_knobs():
    with pytest.raises(ConfigError, match="copy, reverse, sort, translate, translate-en-es"):
        make_task("cpy")
    with pytest.raises(ConfigError, match="n_symbols"):
        make_task("copy", n_sym=3)
    with pytest.raises(ConfigError, match="too small"):
        make_task("copy", n_symbols=2, max_len=2, n_train=50, n_valid=10, n_test=10)
    assert set(TASKS) == {"copy", "reverse", "sort", "translate", "translate-en-es", "lm"}


def test_translate_task_shares_one_vocabulary():
    task = make_task("translate", seed=1, n_train=3_000, n_valid=100, n_test=100)
    assert isinstance(task.vocab, Vocab)
    assert task.max_len <= 16
    s, t = task.splits["valid"][0]
    assert task.detokenize(s) == task.sources("valid")[0]
    assert task.detokenize(t) == task.references("valid")[0]


@pytest.fixture(scope="module")
def en_es():
    return make_task("translate-en-es", seed=0, n_merges=1_000)


def test_translate_en_es_splits_and_bpe(en_es):
    task = en_es
    assert [len(task.splits[k]) for k in ("valid", "test")] == [500, 500]
    assert len(task.splits["train"]) == 11_741 - 1_000
    train_src = set(task.sources("train"))
    assert not train_src & set(task.sources("test"))
    assert not train_src & set(task.sources("valid"))
    # BPE learned on train: every train sentence round-trips exactly, punctuation included.
    pairs = zip(task.splits["train"], task.texts["train"], strict=True)
    for (s, t), (src, ref) in list(pairs)[:300]:
        assert task.detokenize(s) == src and task.detokenize(t) == ref
    assert task.sources("train")[0].endswith(",")
    again = tokenizer_from_dict(json.loads(json.dumps(task.vocab.to_dict())))
    assert again.tokenize(task.sources("test")[0]) == task.splits["test"][0][0]
    assert len(task.vocab) > 1_000


def test_normalize():
    assert normalize("EN el  principio, crió Dios: ¿sí? ") == "en el principio, crió dios: ¿sí?"
    assert normalize("The LORD’s house.", lowercase=False) == "The LORD’s house."


def test_translate_en_es_rejects_bad_max_words():
    with pytest.raises(ConfigError, match="1..20"):
        make_task("translate-en-es", max_words=30)
