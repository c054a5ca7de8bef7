"""Every error code a service raises has words on the pages (one place: pages/words.py)."""

from __future__ import annotations

from agentruns import errors
from agentruns.words import WORDS, failure_sentence, sentence


def codes() -> set[str]:
    found, todo = set(), [errors.AgentrunsError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        found.add(cls.code)
    return found - {errors.AgentrunsError.code}


def test_every_error_code_has_a_sentence():
    assert codes() - set(WORDS) == set()


def test_a_sentence_keeps_the_detail_that_says_more():
    error = errors.Conflict("The run already ended (completed).")
    assert sentence(error).endswith("(The run already ended (completed).)")
    assert sentence(errors.NotFound()) == WORDS["not_found"]


def test_a_refused_runs_failure_reads_as_words_then_the_cg7_message():
    failure = {"code": "context_refused", "detail": 'snippet "x" is declared secret …'}
    assert failure_sentence(failure) == f"{WORDS['context_refused']} {failure['detail']}"
    assert failure_sentence({"code": "odd"}) == "odd"
