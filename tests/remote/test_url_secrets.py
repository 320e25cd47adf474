"""No part of a ``--remote-url`` password in what kvpool says about the URL (url_forms.py
NOTE(url-secret)): the exit-2 message of a refused URL, and the URL as the tier's log lines
show it (``connections.where``) for one it accepts. Passwords are generated (any printable
text: unencoded '/', '?', '#', '@', ':', '%', and characters NFKC folds into them) in every
form the tier takes."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from kvpool.errors import ConfigError
from kvpool.remote import RedisTier, ValueCodec
from kvpool.remote.connections import where
from kvpool.remote.url_forms import check_url, shown_url
from kvpool.server import serve
from tests.remote.conftest import NS

FORMS = [
    "redis://admin:{}@127.0.0.1:6379/0",
    "rediss://admin:{}@127.0.0.1:6379",
    "redis://admin:{}@127.0.0.1:6379?db=x",  # refused for its db, whatever the password
    "redis+cluster://admin:{}@127.0.0.1:7000,127.0.0.1:7001",
    "rediss+cluster://admin:{}@127.0.0.1:x",  # refused for its port
    "redis+sentinel://admin:{}@127.0.0.1:26379,127.0.0.1:26380/mymaster",
    "redis+sentinel://admin:{}@127.0.0.1:26379",  # refused: no service
    "unix://admin:{}@/tmp/redis.sock?db=0",
    "redis://127.0.0.1:6379?password={}&db=0",
    "redis://127.0.0.1:6379?db=x&ssl_password={}",
    "redis+cluster://127.0.0.1:7000?password={}",
    "unix:///tmp/redis.sock?password={}",
    "redis:/admin:{}@127.0.0.1:6379",  # refused: no '://'
]
# letters and digits to other letters and digits: a password of the same shape, so what a
# message says of it (as opposed to what it quotes) stays the same
_TWIN = str.maketrans(string.ascii_letters + string.digits,
                      string.ascii_letters[13:26] + string.ascii_letters[:13] +
                      string.ascii_letters[39:] + string.ascii_letters[26:39] +
                      string.digits[5:] + string.digits[:5])
PASSWORDS = st.text(st.one_of(st.sampled_from(string.printable.strip() + "／？＃＠："),
                              st.characters(blacklist_categories=("Cs", "Cc"))),
                    min_size=1, max_size=24)


def said(url: str) -> tuple[str, str]:
    """(verdict, what kvpool says of ``url``): the refusal, or the URL as errors and the
    tier's log lines show it."""
    try:
        kind = check_url(url)
    except ConfigError as exc:
        return "refused", str(exc)
    return kind, f"{shown_url(url)} {where(url)}"


def leaked(password: str, text: str, twin_text: str) -> list[str]:
    """The password, or a run of 2+ of its letters and digits, in ``text`` and not in
    ``twin_text`` (the same said of the twin password: what both hold is kvpool's own)."""
    runs = {password, *re.findall(r"[0-9A-Za-z]{2,}", password)}
    return [r for r in runs if r in text and r not in twin_text]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(FORMS), PASSWORDS)
@example(FORMS[0], "hunter2/x")
@example(FORMS[0], "hun?ter2")
@example(FORMS[0], "6390/x")  # the tail once read as a path: port 6390 accepted
@example(FORMS[3], "hunter2/x")
@example(FORMS[5], "hunter2#x")
@example(FORMS[0], "p／x")  # urllib's NFKC error quotes the whole netloc
@example(FORMS[3], "p／x")
@example(FORMS[8], "hunter2")
@example(FORMS[9], "hunter2#x")
def test_no_part_of_the_password_is_said(form, password):
    url = form.format(password)
    verdict, text = said(url)
    twin_verdict, twin_text = said(form.format(password.translate(_TWIN)))
    assume(verdict == twin_verdict)  # a password spelling a query option changes the verdict
    assert not leaked(password, text, twin_text), (url, text)


@pytest.mark.parametrize("url", [
    "redis://admin:hunter2/x@127.0.0.1:6379",
    "redis+cluster://admin:hunter2/x@127.0.0.1:7000",
    "redis://admin:hun?ter2@127.0.0.1:6379",
    "redis://127.0.0.1:6379?password=hunter2&db=x",
    "redis+sentinel://admin:hunter2#x@127.0.0.1:26379/mymaster",
])
def test_serve_exits_2_without_the_password(url, capsys):
    """The probe's repro (kvpool serve --remote-url URL): exit 2, the fault and the forms."""
    assert serve.main(["--remote-url", url, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "hun" not in err and "ter2" not in err, err
    assert err.startswith("kvpool serve: --remote-url ") and "HOST:PORT" in err, err


def test_a_password_that_reads_as_a_port_never_reaches_the_tiers_log_lines():
    """``redis://admin:6390/x@HOST:PORT``: urllib ends the host part at the '/', so the tier
    would call admin:6390 and log "remote tier redis://admin:6390 is not reachable" (and
    redis-py's "Error connecting to admin:6390"). Refused before a connection is made."""
    with pytest.raises(ConfigError, match="percent-encode") as e:
        RedisTier("redis://admin:6390/x@127.0.0.1:6379", ValueCodec(NS))
    assert "6390" not in str(e.value)
