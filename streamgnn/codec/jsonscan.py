"""A Numba scanner for the plainest JSON event messages, straight into columns: no Python object per event.

Decoding with msgspec costs about as much again in building and unpacking a struct per event as in the
parse itself; for the shape most topics carry, ``{"kind": "edge_add", "src": 12, "dst": 7, "t": 36.0,
"eid": 5}`` (int ids, no features), ``scan`` reads the bytes once and writes the columns. It takes a
strict subset of JSON and stops at the first message outside it, so whatever it accepts means exactly
what the codec reads from it:

* one object per message, JSON whitespace around tokens, but no line break inside the object (the codec
  reads JSON lines: that would be two lines);
* keys ``src``, ``dst``, ``t``, ``eid`` (all required), ``kind``, ``weight``, each at most once, spelled
  without escapes; any other key stops it;
* ids, ``eid`` and an int ``kind`` (0 or 1) are JSON integers of at most 18 digits (within int64);
  ``kind`` may also be ``"edge_add"`` or ``"edge_delete"``; ``weight`` may be ``null``;
* ``t`` and ``weight`` are JSON numbers whose value one IEEE operation on exact operands gives (a
  significand up to 2**53 and a power of ten up to 1e22: Clinger's fast path, so correctly rounded, as
  Python's ``float()`` is). Other numbers stop it.

Message ``m`` is ``buf[starts[m]:ends[m]]``. ``scan`` returns how many messages from the first it read, and
the columns (valid up to there); the caller takes another path for a poll it does not read whole.

>>> import numpy as np
>>> values = [b'{"src":1,"dst":2,"t":1.5,"eid":7}', b'{"kind":"edge_delete","src":1,"dst":2,"t":2,"eid":8}']
>>> ends = np.cumsum([len(v) for v in values])
>>> buf = np.frombuffer(b"".join(values), np.uint8)
>>> done, kind, src, dst, t, eid, weight, weighted = scan(buf, ends - [len(v) for v in values], ends)
>>> done, kind.tolist(), t.tolist(), eid.tolist()
(2, [0, 1], [1.5, 2.0], [7, 8])
"""

from __future__ import annotations

import numpy as np
from numba import njit

_POW10 = np.array([10.0**k for k in range(23)])  # each exact as a double
_EXACT = 2**53  # integers up to here are exact doubles
_MAX_DIGITS = 18  # significant digits that surely fit int64
SRC, DST, T, EID, KIND, WEIGHT = 1, 2, 4, 8, 16, 32
_REQUIRED = SRC | DST | T | EID
_EDGE_ADD = np.frombuffer(b'edge_add"', np.uint8)
_EDGE_DELETE = np.frombuffer(b'edge_delete"', np.uint8)
_NULL = np.frombuffer(b"null", np.uint8)
_QUOTE, _BACKSLASH, _COLON, _COMMA, _OPEN, _CLOSE, _MINUS, _DOT = 34, 92, 58, 44, 123, 125, 45, 46


@njit(cache=True)
def _space(buf, i, end, newlines):
    """The index of the first byte at or after ``i`` that is not JSON whitespace (a line break only where
    ``newlines``); -1 at a line break otherwise."""
    while i < end:
        c = buf[i]
        if c == 10:
            if not newlines:
                return -1
        elif c != 32 and c != 13 and c != 9:
            break
        i += 1
    return i


@njit(cache=True)
def _number(buf, i, end):
    """The JSON number at ``i``: (index after it, or -1 if none or beyond this scanner; is it an integer;
    negative; significand; power of ten)."""
    neg = i < end and buf[i] == _MINUS
    if neg:
        i += 1
    if i >= end or not 48 <= buf[i] <= 57 or (buf[i] == 48 and i + 1 < end and 48 <= buf[i + 1] <= 57):
        return -1, False, False, 0, 0  # no digit, or a leading zero
    mant = 0
    digits = 0  # significant ones
    exp10 = 0
    while i < end and 48 <= buf[i] <= 57:
        mant = mant * 10 + (buf[i] - 48)
        if mant:
            digits += 1
        i += 1
        if digits > _MAX_DIGITS:
            return -1, False, False, 0, 0
    integer = True
    if i < end and buf[i] == _DOT:
        integer = False
        i += 1
        start = i
        while i < end and 48 <= buf[i] <= 57:
            mant = mant * 10 + (buf[i] - 48)
            if mant:
                digits += 1
            exp10 -= 1
            i += 1
            if digits > _MAX_DIGITS:
                return -1, False, False, 0, 0
        if i == start:
            return -1, False, False, 0, 0
    if i < end and (buf[i] == 101 or buf[i] == 69):  # e, E
        integer = False
        i += 1
        negative_exp = i < end and buf[i] == _MINUS
        if i < end and (buf[i] == 43 or buf[i] == _MINUS):
            i += 1
        start = i
        e = 0
        while i < end and 48 <= buf[i] <= 57:
            e = min(e * 10 + (buf[i] - 48), 1_000_000)
            i += 1
        if i == start:
            return -1, False, False, 0, 0
        exp10 += -e if negative_exp else e
    return i, integer, neg, mant, exp10


@njit(cache=True)
def _double(integer, neg, mant, exp10):
    """The double the number denotes where one exact operation gives it; NaN (never a JSON value) else."""
    if mant == 0:
        return -0.0 if neg and not integer else 0.0  # json reads "-0" as the int 0
    if mant > _EXACT or exp10 > 22 or exp10 < -22:
        return np.nan
    v = float(mant)
    if exp10 > 0:
        v *= _POW10[exp10]
    elif exp10 < 0:
        v /= _POW10[-exp10]
    return -v if neg else v


@njit(cache=True)
def _key(buf, i, end):
    """The field the key starting after its quote at ``i`` names: (index after its closing quote, field
    bit, 0 for any other key or one with escapes or bytes outside printable ASCII)."""
    j = i
    while j < end and buf[j] != _QUOTE:
        if buf[j] == _BACKSLASH or buf[j] < 32 or buf[j] > 126:
            return -1, 0
        j += 1
    n = j - i
    field = 0
    if j >= end:
        return -1, 0
    if n == 1 and buf[i] == 116:  # t
        field = T
    elif n == 3:
        a, b, c = buf[i], buf[i + 1], buf[i + 2]
        if a == 115 and b == 114 and c == 99:  # src
            field = SRC
        elif a == 100 and b == 115 and c == 116:  # dst
            field = DST
        elif a == 101 and b == 105 and c == 100:  # eid
            field = EID
    elif n == 4 and _word(buf, i, end, _KIND_NAME):
        field = KIND
    elif n == 6 and _word(buf, i, end, _WEIGHT_NAME):
        field = WEIGHT
    return j + 1, field


_KIND_NAME = np.frombuffer(b"kind", np.uint8)
_WEIGHT_NAME = np.frombuffer(b"weight", np.uint8)


@njit(cache=True)
def _word(buf, i, end, word):
    if i + len(word) > end:
        return False
    for k in range(len(word)):  # noqa: SIM110 - a plain loop for Numba
        if buf[i + k] != word[k]:
            return False
    return True


@njit(cache=True, nogil=True)  # arrays only: the caller's other threads may run meanwhile
def scan(buf, starts, ends):
    """(messages read from the first, kind, src, dst, t, eid, weight, weighted): see the module doc."""
    n = len(ends)
    kind = np.zeros(n, np.int8)
    src = np.empty(n, np.int64)
    dst = np.empty(n, np.int64)
    t = np.empty(n, np.float64)
    eid = np.empty(n, np.int64)
    weight = np.ones(n, np.float64)
    weighted = np.zeros(n, np.bool_)
    for m in range(n):
        end = ends[m]
        i = _space(buf, starts[m], end, True)
        if i >= end or buf[i] != _OPEN:
            return m, kind, src, dst, t, eid, weight, weighted
        seen = 0
        while True:
            i = _space(buf, i + 1, end, False)  # after "{" or ","
            if i < 0 or i >= end or buf[i] != _QUOTE:
                return m, kind, src, dst, t, eid, weight, weighted
            i, field = _key(buf, i + 1, end)
            if field == 0 or seen & field:
                return m, kind, src, dst, t, eid, weight, weighted
            seen |= field
            i = _space(buf, i, end, False)
            if i < 0 or i >= end or buf[i] != _COLON:
                return m, kind, src, dst, t, eid, weight, weighted
            i = _space(buf, i + 1, end, False)
            if i < 0 or i >= end:
                return m, kind, src, dst, t, eid, weight, weighted
            if field == KIND and buf[i] == _QUOTE:
                if _word(buf, i + 1, end, _EDGE_ADD):
                    i += 1 + len(_EDGE_ADD)
                elif _word(buf, i + 1, end, _EDGE_DELETE):
                    kind[m] = 1
                    i += 1 + len(_EDGE_DELETE)
                else:
                    return m, kind, src, dst, t, eid, weight, weighted
            elif field == WEIGHT and _word(buf, i, end, _NULL):
                i += len(_NULL)
            else:
                i, integer, neg, mant, exp10 = _number(buf, i, end)
                if i < 0:
                    return m, kind, src, dst, t, eid, weight, weighted
                if field == T or field == WEIGHT:  # noqa: SIM109 - plain compares for Numba
                    x = _double(integer, neg, mant, exp10)
                    if np.isnan(x):
                        return m, kind, src, dst, t, eid, weight, weighted
                    if field == T:
                        t[m] = x
                    else:
                        weight[m] = x
                        weighted[m] = True
                elif not integer:
                    return m, kind, src, dst, t, eid, weight, weighted
                elif field == SRC:
                    src[m] = -mant if neg else mant
                elif field == DST:
                    dst[m] = -mant if neg else mant
                elif field == EID:
                    eid[m] = -mant if neg else mant
                elif mant == 0 or (mant == 1 and not neg):  # kind 0 or 1 ("-0" is 0)
                    kind[m] = mant
                else:
                    return m, kind, src, dst, t, eid, weight, weighted
            i = _space(buf, i, end, False)
            if i < 0 or i >= end or (buf[i] != _COMMA and buf[i] != _CLOSE):
                return m, kind, src, dst, t, eid, weight, weighted
            if buf[i] == _CLOSE:
                break
        if seen & _REQUIRED != _REQUIRED or _space(buf, i + 1, end, True) != end:
            return m, kind, src, dst, t, eid, weight, weighted
    return n, kind, src, dst, t, eid, weight, weighted
