"""Comma-separated option values (``--tokens 1,16,128``, ``--sizes-mb 1,64``, ``--layouts tp2pp1``).

Every list option of `srl-profile` is split here: an empty value or an empty item (``1,,2``, a
trailing comma) is an error, not skipped; numbers are bounded (a typo such as ``99999999999``
is refused, not an OverflowError mid-profile or a world of that many processes) and finite
(``1e400``, ``nan`` refused). Errors are `ValueError` naming the option and the item.
"""

from __future__ import annotations

import math


def split_items(text: str, option: str, what: str) -> list[str]:
    """The stripped items of ``text``; an empty value or item is an error naming ``option``."""
    if text is None or not text.strip():
        raise ValueError(f"{option}: empty; expected {what}")
    items = [t.strip() for t in text.split(",")]
    for i, item in enumerate(items, 1):
        if not item:
            raise ValueError(f"{option} {text!r}: item {i} is empty (two commas, or a comma at an end); "
                             f"expected {what}")
    return items


def parse_int_list(text: str, option: str, lo: int = 1, hi: int = 1 << 31) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): sorted, duplicates dropped, each a whole number in [lo, hi]."""
    what = f"comma-separated whole numbers in [{lo}, {hi}]"
    out = set()
    for item in split_items(text, option, what):
        try:
            v = int(item)
        except ValueError:
            raise ValueError(f"{option}: {item!r} is not a whole number; expected {what}") from None
        if not lo <= v <= hi:
            raise ValueError(f"{option}: {item} is out of range; expected {what}")
        out.add(v)
    return tuple(sorted(out))


def parse_number_list(text: str, option: str, hi: float) -> tuple[float, ...]:
    """``"1,64.5"`` -> (1.0, 64.5) in the given order: each a finite number in (0, hi]."""
    what = f"comma-separated numbers in (0, {int(hi) if float(hi).is_integer() else hi}]"
    out = []
    for item in split_items(text, option, what):
        try:
            v = float(item)
        except ValueError:
            raise ValueError(f"{option}: {item!r} is not a number; expected {what}") from None
        if not (math.isfinite(v) and 0 < v <= hi):
            raise ValueError(f"{option}: {item} is out of range; expected {what}")
        out.append(v)
    return tuple(out)


def parse_name_list(text: str, option: str, known=None) -> tuple[str, ...]:
    """``"a,b"`` -> ("a", "b"); with ``known``, an unknown name is an error with a did-you-mean."""
    from simrl.strictio import did_you_mean

    names = tuple(split_items(text, option, "comma-separated names" if known is None
                              else f"comma-separated names from: {', '.join(known)}"))
    if known is not None:
        for n in names:
            if n not in known:
                raise ValueError(f"{option}: unknown {n!r}{did_you_mean(n, list(known))}; expected one of: "
                                 f"{', '.join(known)}")
    return names
