"""A reader for the JSON5 that Zenoh's configuration files use (comments, unquoted keys, trailing
commas).

The standard library reads only JSON, and the package adds no dependency
for the router templates of ``zenoh_deployment``; a test checks that it
reads every shipped file as Zenoh's own parser does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


class Json5Error(ValueError):
    pass


class _Json5Reader:
    """JSON5 as the shipped configs write it: comments, unquoted keys, trailing commas, single or
    double quotes.

    Hexadecimal numbers, numbers with a leading '+' or '.', Infinity/NaN and
    multi-line strings (JSON5 features the configs do not use) are refused
    with their position.
    """

    _NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
    _IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
    _ESCAPES = {
        "n": "\n",
        "t": "\t",
        "r": "\r",
        "b": "\b",
        "f": "\f",
        "0": "\0",
        "/": "/",
        "\\": "\\",
        '"': '"',
        "'": "'",
    }

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source, self.at = text, source, 0

    def fail(self, what: str):
        line = self.text.count("\n", 0, self.at) + 1
        raise Json5Error(f"{self.source}:{line}: {what}")

    def skip(self) -> None:
        while self.at < len(self.text):
            if self.text[self.at].isspace():
                self.at += 1
            elif self.text.startswith("//", self.at):
                end = self.text.find("\n", self.at)
                self.at = len(self.text) if end < 0 else end + 1
            elif self.text.startswith("/*", self.at):
                end = self.text.find("*/", self.at + 2)
                if end < 0:
                    self.fail("unterminated /* comment")
                self.at = end + 2
            else:
                return

    def document(self):
        value = self.value()
        self.skip()
        if self.at != len(self.text):
            self.fail(f"unexpected {self.text[self.at]!r} after the document")
        return value

    def value(self):
        self.skip()
        if self.at >= len(self.text):
            self.fail("unexpected end of file")
        char = self.text[self.at]
        if char == "{":
            return self.container("}", self.member, {})
        if char == "[":
            return self.container("]", lambda into: into.append(self.value()), [])
        if char in "\"'":
            return self.string()
        for word, meaning in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.at):
                self.at += len(word)
                return meaning
        number = self._NUMBER.match(self.text, self.at)
        if number:
            self.at = number.end()
            return json.loads(number.group())
        self.fail(f"unexpected {char!r}")

    def container(self, close: str, read_item, into):
        self.at += 1
        while True:
            self.skip()
            if self.text.startswith(close, self.at):
                self.at += 1
                return into
            read_item(into)
            self.skip()
            if self.text.startswith(",", self.at):
                self.at += 1
            elif not self.text.startswith(close, self.at):
                self.fail(f"expected ',' or {close!r}")

    def member(self, into: dict) -> None:
        if self.text[self.at] in "\"'":
            name = self.string()
        else:
            identifier = self._IDENTIFIER.match(self.text, self.at)
            if not identifier:
                self.fail("expected a key")
            name, self.at = identifier.group(), identifier.end()
        self.skip()
        if not self.text.startswith(":", self.at):
            self.fail(f"expected ':' after key {name!r}")
        self.at += 1
        if name in into:
            self.fail(f"duplicate key {name!r}")
        into[name] = self.value()

    def string(self) -> str:
        quote, self.at, parts = self.text[self.at], self.at + 1, []
        while self.at < len(self.text):
            char = self.text[self.at]
            if char == quote:
                self.at += 1
                return "".join(parts)
            if char == "\n":
                break
            if char == "\\":
                escape = self.text[self.at + 1 : self.at + 2]
                if escape == "u":
                    parts.append(chr(int(self.text[self.at + 2 : self.at + 6], 16)))
                    self.at += 6
                    continue
                if escape not in self._ESCAPES:
                    self.fail(f"unsupported escape \\{escape}")
                parts.append(self._ESCAPES[escape])
                self.at += 2
                continue
            parts.append(char)
            self.at += 1
        self.fail("unterminated string")


def read_json5(path: Path):
    return _Json5Reader(Path(path).read_text(), str(path)).document()
