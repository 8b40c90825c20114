"""Text from hosts and plan files is shown, never obeyed: by a terminal or by markdown;
and a number in it is read only when it is plainly one."""

from __future__ import annotations

import re

# C0/C1 control characters (but tab and newline) and the bidi controls of "Trojan Source":
# text from hosts and plan files can carry terminal escapes; they are shown, never obeyed.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")


def json_escaped(text: str) -> str:
    """JSON text with every control and bidi character inside its strings written as a
    \\u escape: the same data for a parser, nothing a terminal or an editor would obey.
    (json.dumps escapes C0 itself, but not DEL, C1 or the bidi controls.)"""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def printable(text: str) -> str:
    """`text` with every control character written out as an escape (`\\x1b`)."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", text)


def md(text: str) -> str:
    """Plain text inside markdown: no accidental formatting, no HTML from host data."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def fenced(text: str) -> str:
    """Text for inside a ``` block: it can't close the block."""
    return text.replace("```", "ˋˋˋ")


# Decimal numbers a host or a plan file gives (sizes, modes, ids, exit codes): int() of a
# longer digit string costs quadratic time, and past 4300 digits Python refuses it.
MAX_DIGITS = 18


def decimal(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """A non-negative decimal number of ASCII digits, at most `max_digits` of them; None
    otherwise. str.isdigit alone is no guard: it says yes to "²", which int() then refuses
    with a bare ValueError, and to other scripts' digits ("٣"), which int() reads."""
    if 0 < len(text) <= max_digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def octal(text: str, max_digits: int = 4) -> int | None:
    """A file mode as stat's %a and notes print it: octal ASCII digits, at most
    `max_digits`; None otherwise."""
    if 0 < len(text) <= max_digits and text.isascii() and set(text) <= set("01234567"):
        return int(text, 8)
    return None


def tcp_port(value: object) -> int | None:
    """A TCP port as a record or ssh_config gives it (a number, or its ASCII digits):
    1-65535; None otherwise (a bool is no number here)."""
    number = decimal(value, 5) if isinstance(value, str) else \
        value if isinstance(value, int) and not isinstance(value, bool) else None
    return number if number is not None and 0 < number < 65536 else None
