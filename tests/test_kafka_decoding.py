"""The JSON fast path decides nothing on its own: whatever it accepts, the codec's careful path accepts
identically, and everything else goes to the careful path (no broker needed)."""

from __future__ import annotations

import json

import numpy as np

from streamgnn.codec import decode_json_lines
from streamgnn.connectors.kafka.fastjson import fast_rows

TRICKY = [
    b'{"src":1,"dst":2,"t":1.0,"eid":1}',
    b'{"src":1,"dst":2,"t":3,"eid":2,"weight":0.5}',
    b'{"kind":"edge_delete","src":1,"dst":2,"t":4.0,"eid":3}',
    b'{"kind":1,"src":1,"dst":2,"t":4.0,"eid":4,"features":[1,2.5]}',
    b'{"src":"a","dst":"b","t":1.0,"eid":5}',
    b'{"src":1,"dst":2,"t":1.0,"eid":6,"extra":{"x":[1,2]}}',
    b'{"src":1,"src":7,"dst":2,"t":1.0,"eid":7}',  # a repeated key: the last one counts, as in json
    b' {"src":1,"dst":2,"t":1.0,"eid":8}\n',
    b'{"src":1,"dst":2,"t":-1.0,"eid":9}',
    b'{"src":1,"dst":2,"t":NaN,"eid":10}',
    b'{"src":1,"dst":2,"t":1e400,"eid":11}',
    b'{"src":true,"dst":2,"t":1.0,"eid":12}',
    b'{"src":1,"dst":2,"t":1.0,"eid":9223372036854775808}',
    b'{"src":18446744073709551616,"dst":2,"t":1.0,"eid":13}',
    b'{"src":"","dst":"b","t":1.0,"eid":14}',
    b'{"src":"\\ud800","dst":"b","t":1.0,"eid":15}',
    b'{"src":1,"t":1.0,"eid":16}',
    b'{"kind":"node_update","src":1,"t":1.0,"eid":17,"features":[0.5,0.5]}',
    b'{"kind":7,"src":1,"dst":2,"t":1.0,"eid":18}',
    b'{"src":1,"dst":2,"t":1.0,"eid":19,"weight":1e39}',
    b'{"src":1,"dst":2,"t":1.0,"eid":20}\n{"src":1,"dst":2,"t":2.0,"eid":21}',
    b'{"src":1,"dst":2,"t":1.0,"eid":22',
    b'[{"src":1,"dst":2,"t":1.0,"eid":23}]',
    b'\xef\xbb\xbf{"src":1,"dst":2,"t":1.0,"eid":24}',
    b'{"src":1,"dst":"b","t":1.0,"eid":25}',
    b'{"src":1,"dst":2,"t":"1","eid":26}',
]


def same(a, b) -> bool:
    cols = ("kind", "src", "dst", "t", "eid", "weight", "features")
    return all(
        (getattr(a, c) is None and getattr(b, c) is None)
        or (
            getattr(a, c) is not None
            and getattr(b, c) is not None
            and np.array_equal(getattr(a, c), getattr(b, c))
        )
        for c in cols
    )


def test_every_message_the_fast_path_accepts_decodes_exactly_as_the_codec_decodes_it():
    accepted = 0
    for value in TRICKY:
        fast = fast_rows([value], "t:0")
        careful, letters = decode_json_lines(value, "t:0")
        if fast is not None:
            accepted += 1
            assert not letters and len(careful) == 1 and same(fast, careful), value
    assert accepted >= 7  # the plain shapes do take the fast path


def test_a_run_is_accepted_only_whole_and_only_with_one_id_type_and_feature_width():
    rng = np.random.default_rng(0)
    ends = rng.integers(0, 50, (500, 2)).tolist()
    plain = [
        json.dumps({"src": s, "dst": d, "t": float(i), "eid": i}).encode() for i, (s, d) in enumerate(ends)
    ]
    batch = fast_rows(plain, "t:0")
    careful, letters = decode_json_lines(b"\n".join(plain), "t:0")
    assert batch is not None and not letters and same(batch, careful)
    for odd in (TRICKY[4], TRICKY[3], TRICKY[9], TRICKY[20]):  # str ids, features, NaN, two lines
        assert fast_rows([*plain[:10], odd, *plain[10:20]], "t:0") is None
