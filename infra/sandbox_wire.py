"""Values and messages on the wire between a test's process and the judge.

A call-based return value reaches the parent "on the wire" (to_wire): JSON in which lists and
scalars are themselves and a tuple, set, frozenset or dict is tagged ({"tuple": [...]},
{"set": [...]}, {"frozenset": [...]}, {"dict": [[key, value], ...]}), so a rule can tell a
tuple from a list and a set from a sorted list, as Python's `==` does. Only exact builtin
types are sent, so no object the program builds (an __eq__ that is always True, an int
subclass) reaches a comparison. The parent builds no set or dict from a returned value
(python_equal walks it along the expected one), so crafted hash collisions cannot slow it.

The child's report on HARNESS_FD is hostile data: parse_message checks it field by field
(JSON with a fixed set of keys, each typed and size-bounded; anything else makes the test a
runtime_error). Pipes between the parent, the worker and the checker carry frames: an 8-byte
length, then the payload.
"""

from __future__ import annotations

import collections
import json
import os
import select
import time

STDERR_TAIL = 2000          # characters of stderr kept per test
SHOWN_OUTPUT = 1000         # characters of actual output kept in TestResult.output
MESSAGE_KEYS = frozenset({"result", "result_error", "exception"})
MAX_RESULT_DEPTH = 100
_PLAIN_SCALARS = (type(None), bool, int, float, str)

_WIRE_TAGS = ("tuple", "set", "frozenset", "dict")


# Subclasses that a benchmark's `==` against builtin data compares as their base: the stdlib's
# Counter and OrderedDict, whose __eq__ with a plain dict is dict's (HumanEval's check, and
# APPS's and LiveCodeBench's runners, pass them).
_COMPARED_AS_BASE = frozenset({collections.Counter, collections.OrderedDict})


def to_wire(value, depth: int = 0):
    """Builtin data -> the wire form (see above); TypeError for anything else, so no object the
    program builds (an __eq__ that is always True, an int subclass) is sent. A list, tuple or
    dict subclass whose == is its base's (a defaultdict, a namedtuple, Counter, OrderedDict) is
    sent as its base, with the items the base's == compares (read through the base, never
    through methods the subclass may override)."""
    kind = type(value)
    if depth > MAX_RESULT_DEPTH:
        raise TypeError(f"nested deeper than {MAX_RESULT_DEPTH} levels")
    if kind in _PLAIN_SCALARS:
        return value
    if kind is set or kind is frozenset:
        return {kind.__name__: [to_wire(v, depth + 1) for v in value]}
    base = _compared_as(kind)
    if base is list:
        return [to_wire(v, depth + 1) for v in list.__iter__(value)]
    if base is tuple:
        return {"tuple": [to_wire(v, depth + 1) for v in tuple.__iter__(value)]}
    if base is dict:
        return {"dict": [[to_wire(k, depth + 1), to_wire(v, depth + 1)]
                         for k, v in dict.items(value)]}
    raise TypeError(f"a value of type {kind.__name__}")


def _compared_as(kind: type) -> type | None:
    """list, tuple or dict when `==` compares a value of this type as that builtin, else None."""
    for base in (list, tuple, dict):
        if issubclass(kind, base):
            same_eq = kind.__eq__ is base.__eq__ and kind.__ne__ is base.__ne__
            return base if kind is base or same_eq or kind in _COMPARED_AS_BASE else None
    return None


def from_wire(wire):
    """The wire form -> the Python value (in the checker and the program's process, whose own
    CPU time pays for it; the parent never builds a set or dict from the program's data)."""
    tag, items = wire_tag(wire)
    if tag is None:
        return [from_wire(v) for v in wire] if type(wire) is list else wire
    if tag == "dict":
        return {from_wire(k): from_wire(v) for k, v in items}
    return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](map(from_wire, items))


def wire_tag(wire) -> tuple[str | None, list | None]:
    """("tuple" | "set" | "frozenset" | "dict", its items) for a tagged value, else (None, None)."""
    if type(wire) is dict:
        ((tag, items),) = wire.items()
        return tag, items
    return None, None


def valid_wire(wire, depth: int) -> bool:
    """Is this JSON (from the program's process) a well-formed wire value, nested at most
    `depth` levels?"""
    kind = type(wire)
    if kind in _PLAIN_SCALARS:
        return True
    if depth <= 0:
        return False
    if kind is list:
        return all(valid_wire(v, depth - 1) for v in wire)
    if kind is not dict or len(wire) != 1:
        return False
    tag, items = next(iter(wire.items()))
    if tag not in _WIRE_TAGS or type(items) is not list:
        return False
    if tag == "dict":
        return all(type(p) is list and len(p) == 2 and valid_wire(p[0], depth - 1)
                   and valid_wire(p[1], depth - 1) for p in items)
    return all(valid_wire(v, depth - 1) for v in items)


def as_json_data(wire):
    """The own rule's view of a returned value: tuples as lists, sets as sorted lists, dicts
    with string keys only (TypeError otherwise, as for a set whose items do not sort)."""
    tag, items = wire_tag(wire)
    if tag is None:
        return [as_json_data(v) for v in wire] if type(wire) is list else wire
    if tag == "tuple":
        return [as_json_data(v) for v in items]
    if tag == "dict":
        if not all(type(k) is str for k, _ in items):
            raise TypeError("a dict with non-string keys")
        return {k: as_json_data(v) for k, v in items}
    return sorted(as_json_data(v) for v in items)


def python_equal(expected, actual) -> bool:
    """Python's `expected == actual` for `actual` on the wire, walked along `expected` (a value
    of the benchmark's): bool, int and float compare as numbers, a list equals only a list, a
    tuple only a tuple, a set or frozenset only a set or frozenset with the same members, a dict
    only a dict with the same items. No set or dict is built from the program's data: its items
    are looked up in the expected one (crafted hash collisions cannot make judging quadratic)."""
    kind = type(expected)
    if kind in (bool, int, float):
        return type(actual) in (bool, int, float) and expected == actual
    if kind is str or expected is None:
        return type(actual) is kind and expected == actual
    if kind is list:
        return (type(actual) is list and len(actual) == len(expected)
                and all(map(python_equal, expected, actual)))
    tag, items = wire_tag(actual)
    if kind is tuple:
        return (tag == "tuple" and len(items) == len(expected)
                and all(map(python_equal, expected, items)))
    if kind is set or kind is frozenset:
        return tag in ("set", "frozenset") and _same_members(expected, items)
    if kind is dict:
        return tag == "dict" and _same_members(expected, items)
    return False


def _same_members(expected, items: list) -> bool:
    """A set (items: wire members) or dict (items: wire [key, value] pairs) against the
    expected one: as many members, each found in it once (by hash, as Python finds it)."""
    if len(items) != len(expected):
        return False
    keys = list(expected)
    index = {k: i for i, k in enumerate(keys)}
    limit = _largest_frozenset(keys)
    seen = set()
    for item in items:
        key, value = item if type(expected) is dict else (item, None)
        try:
            i = index.get(_wire_key(key, limit))
        except TypeError:   # unhashable, or a frozenset larger than any it could equal
            return False
        if i is None or i in seen:
            return False
        if type(expected) is dict and not python_equal(expected[keys[i]], value):
            return False
        seen.add(i)
    return True


def _wire_key(wire, limit: int):
    """A set member or dict key from the wire, as the hashable Python value; a frozenset only up
    to `limit` members (no expected one is larger), so building it costs at most what the
    benchmark's own data does."""
    tag, items = wire_tag(wire)
    if tag is None:
        return wire   # a list stays a list: unhashable, TypeError at the lookup
    if tag == "tuple":
        return tuple(_wire_key(v, limit) for v in items)
    if tag == "frozenset" and len(items) <= limit:
        return frozenset(_wire_key(v, limit) for v in items)
    raise TypeError("not a possible member")


def _largest_frozenset(values) -> int:
    largest = 0
    for v in values:
        if isinstance(v, (tuple, frozenset)):
            largest = max(largest, len(v) if isinstance(v, frozenset) else 0,
                          _largest_frozenset(v))
    return largest


def wire_repr(wire, budget: int = SHOWN_OUTPUT) -> str:
    """repr() of a wire value as Python prints the value, cut at `budget` characters (without
    building the value)."""
    parts: list[str] = []
    size = 0

    def emit(text: str):
        nonlocal size
        parts.append(text)
        size += len(text)

    def add(w):
        if size > budget:
            return
        tag, items = wire_tag(w)
        if tag is None and type(w) is not list:
            emit(repr(w))
        elif tag == "dict":
            emit("{")
            for i, (k, v) in enumerate(items):
                emit(", " if i else "")
                add(k)
                emit(": ")
                add(v)
            emit("}")
        elif tag in ("set", "frozenset") and not items:
            emit(f"{tag}()")
        else:
            items = w if tag is None else items
            opening, closing = {None: "[]", "tuple": "()", "set": "{}", "frozenset": "{}"}[tag]
            emit(("frozenset(" if tag == "frozenset" else "") + opening)
            for i, v in enumerate(items):
                emit(", " if i else "")
                add(v)
            emit(("," if tag == "tuple" and len(items) == 1 else "") + closing
                 + (")" if tag == "frozenset" else ""))

    add(wire)
    return "".join(parts)[:budget]



def parse_message(data: bytes, job: dict) -> dict | None:
    """The child's report, checked field by field; None when it is malformed (the program wrote
    on the harness fd). An empty report (the program closed fd 3) is {}."""
    if not data:
        return {}
    try:
        message = json.loads(data)
    except Exception:   # invalid UTF-8/JSON, too deep (RecursionError), huge ints (ValueError)
        return None
    if not isinstance(message, dict) or not message.keys() <= MESSAGE_KEYS:
        return None
    if "exception" in message and not (isinstance(message["exception"], str)
                                       and len(message["exception"]) <= 200):
        return None
    if "result_error" in message and not (isinstance(message["result_error"], str)
                                          and len(message["result_error"]) <= SHOWN_OUTPUT):
        return None
    if "result" in message and (job["fn_name"] is None or job["check"] or "result_error" in message
                                or not valid_wire(message["result"], MAX_RESULT_DEPTH + 2)):
        return None
    return message

def wire_message(value) -> dict:
    """The child's report of a returned value: on the wire, or why it cannot be."""
    try:
        wire = to_wire(value)
        json.dumps(wire)   # ints over 4300 digits do not serialise
        return {"result": wire}
    except (TypeError, ValueError, RecursionError) as e:
        return {"result_error": f"return value not comparable as data: {e}"[:SHOWN_OUTPUT]}



# --- framed pipes (8-byte length + payload) ---------------------------------------------------

def write_frame(fd: int, payload: bytes):
    data = len(payload).to_bytes(8, "big") + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None) -> bytes | None:
    header = read_exactly(fd, 8, deadline)
    return None if header is None else read_exactly(fd, int.from_bytes(header, "big"), deadline)

