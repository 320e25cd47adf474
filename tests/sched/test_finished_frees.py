"""A finished, aborted or ignored request is freed by reference counting: its group and its
sequences are left in no reference cycle for the cyclic collector to find in a pause
(completion.py NOTE(gc))."""

import gc

from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt


def _cyclic_garbage_kinds(body) -> set[str]:
    """The type names of the objects ``body`` leaves as cyclic garbage."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        body()
        gc.collect()
        return {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def test_finished_aborted_and_ignored_requests_are_no_cyclic_garbage():
    s = make(blocks=8)
    rt = FakeRuntime(s)

    def body():
        s.add_request("done", prompt(20), params(max_tokens=3))
        s.add_request("forked", prompt(20, base=2000), params(max_tokens=3, n=2))
        s.add_request("too_big", prompt(20 * BS))  # ignored: it can never fit
        s.add_request("aborted", prompt(20, base=3000), params(max_tokens=50))
        rt.step()
        rt.step()
        rt.finished.append(s.abort("aborted"))
        rt.drain()

    kinds = _cyclic_garbage_kinds(body)
    assert not kinds & {"SequenceGroup", "Sequence", "PrefillUnit"}, kinds
    assert {f.request_id for f in rt.finished if f is not None} == {
        "done", "forked", "too_big", "aborted"}
    assert_empty(s)
