"""What code assigns to a credential's name that is no credential: an expression.

``key = next(iter(self))``, ``token = session.get('token')``, ``password =
input('Password: ')``, ``const apiKey = process.env.OPENAI_API_KEY;``, ``key=len``,
``self.key = '_local.' + str(id(self))``: the name is a credential's, the value is
code that computes one. Masking it breaks the program a prompt carries (it no
longer parses) and hides nothing, so the value is searched as text instead, where
a key's shape inside it (``OpenAI(api_key='sk-…')``) is still found.

An unquoted value is an expression when it is:

- a call or a subscript (a name, dotted or not, then ``(`` or ``[``), or a bracket
  opening what is itself judged so (``(fam, pro)``, ``[f(), b]``; not ``[hunter2]``);
- a dotted path of names without digits (``process.env.X``, ``self._int``);
- a reference to a variable of a shell, a template or Windows (``$X``, ``${X}``,
  ``%X%``, ``{{ x }}``), or a printf or ``str.format`` placeholder (``%#x``, ``{}``);
- a literal or a builtin of a language (``None``, ``null``, ``true``, ``len``,
  ``lambda``...), a placeholder word (``value``, ``name``: "the key: value pairs"),
  a number of at most three digits (a flag or a count; a PIN has four) or a hex
  constant of at most eight digits (``0x08074b50``; a key has 32 or more);
- a name: one with an underscore (``key_func``), a constant's (``HANDLE``), one a
  credential is named by (``key=key``, ``lasttoken = token``), or any name without
  digits where code assigns it: spaces around ``=`` (``key = args``) or a keyword
  argument (``sort(key=nbits)``);
- a string prefix before a quote (``b''``, ``r'…'``).

What closes the code around it (``key=None):``) is left aside; a value with no
letter or digit is no value (``input('Password: ')`` assigns ``)``). A quoted value
is a string literal, and an expression when an operator follows its closing quote
(``'a' + b``, ``'%s' % x``, ``'{}'.format``), a setting's word (``'yes'``,
``'tab'``), a dotted module path (``'http.cookies'``), a version or an OID, or a
placeholder; one that opens on a comma, a bracket's end or an operator is what
follows a quote that closed a string (``prompt='Password: ', stream=None``). An
unquoted word followed by more words is prose (``key: cannot use "" as a name``).

Left masked, so as not to let a password through: a name with digits
(``hunter2``, and a random token's shape), one changing case more often than a
camelCase name does (``GQHiUkjkaPdFtHs``), and a plain word assigned as
configuration is (``password=dragon``, ``password: dragon``).
"""

from __future__ import annotations

import re

from tailreplay.traces.text.secret_names import is_secret_name
from tailreplay.traces.text.secret_values import changes_case_randomly

__all__ = ["is_expression", "is_plain_literal"]

_CALL = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*[(\[]")
_PATH = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+")
_DIGIT_RUN = re.compile(r"\d+")
_TYPE_NAME = re.compile(r"(?:[A-Z][a-z]+){2,}")
"""A class's name in CapWords, without digits: a type where an annotation gives one."""
_AFTER_TYPE = frozenset(["", ",", ";", ")", "=", "\n", "\r", " "])
_KEYWORD_LEAD = re.compile(r"(?:new|await|yield|typeof|not|lambda)[ \t]+[A-Za-z_$]")
"""An operator word before a name: `new Password('…')`, `await subtle.generateKey(…)`."""
_FILE_NAME = re.compile(r"[A-Za-z_][A-Za-z_-]*(?:\.[A-Za-z_][A-Za-z_-]*)+")
"""A dotted name with dashes and no digits: a file (`git-credential-osxkeychain.o`)."""
_HEAD = re.compile(r"[\w$.]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VARIABLE = re.compile(
    r"\$\{?[A-Za-z_][\w.]*\}?|%[A-Za-z_]\w*%|\{\{.*|\$\(.*|@[A-Za-z_]\w*;?|<[\w .|-]*>"
    r"|%[-#0-9.+ ]*[a-zA-Z]|\{[\w.]*(?:![rsa])?(?::[^}]*)?\}"  # printf and format fields
)
_SHORT_NUMBER = re.compile(r"\d{1,3}|0[xX][0-9a-fA-F]{1,8}")
_WORDS = frozenset(
    [
        "None",
        "True",
        "False",
        "null",
        "true",
        "false",
        "nil",
        "undefined",
        "NULL",
        "NaN",
        "len",
        "str",
        "int",
        "float",
        "bytes",
        "repr",
        "id",
        "hash",
        "bool",
        "list",
        "dict",
        "tuple",
        "set",
        "sorted",
        "lambda",
        "self",
        "this",
        "cls",
        "super",
        "value",
        "val",
        "item",
        "data",
        "obj",
        "arg",
        "args",
        "kwargs",
        "key",
        "keys",
        "name",
        "new",
        "await",
        "async",
        "typeof",
        "function",
        "yield",
        "not",
        "none",
        "string",
        "number",
        "boolean",
        "any",
        "unknown",
        "object",
        "void",
    ]
)
_STRING_PREFIXES = frozenset(["b", "r", "u", "f", "rb", "br", "fr", "rf", "l"])
_OPERATOR_AFTER = re.compile(r"[\"'][ \t]*(?:-(?!-)|[+%*.\[])")  # `' --verbose` is a flag
_PROSE_AFTER = re.compile(r" [A-Za-z][a-z]+\b")
_SETTINGS = frozenset(
    [
        "yes",
        "no",
        "on",
        "off",
        "true",
        "false",
        "none",
        "null",
        "enabled",
        "disabled",
        "default",
        "auto",
        "tab",
        "view",
        "include",
        "test",
        "value",
        "name",
        "key",
    ]
)
_VERSION = re.compile(r"\d+(?:\.\d+)+")


def is_plain_literal(value: str) -> bool:
    """A string literal that is no credential: what ``_literal`` says, or a constant's
    name (``'SIG_IGN'``, ``'SELECTED'``)."""
    return _literal(value) or bool(_NAME.fullmatch(value) and value.isupper() and len(value) > 1)


def _literal(value: str) -> bool:
    """A string literal that is no credential: a setting's word (``'yes'``, ``'tab'``),
    a dotted module path (``'http.cookies'``), a version or an OID, a placeholder."""
    return bool(
        value.lower() in _SETTINGS
        or _dotted(value)
        or _VERSION.fullmatch(value)
        or _VARIABLE.fullmatch(value)
    )


def _dotted(value: str) -> bool:
    """A dotted path of names (``process.env.X``, ``self._int``, ``np.float64``,
    ``win32api.RegEnumKey``), not a token with a dot in it (``l7y1e8.z4nouiysoi853jcq``,
    a Kubernetes bootstrap token): a name holds one run of digits at most."""
    if _PATH.fullmatch(value) is None:
        return False
    return not any(
        len(_DIGIT_RUN.findall(part)) > 1 or changes_case_randomly(part)
        for part in value.split(".")
    )


def is_expression(
    value: str, text: str, start: int, end: int, sep: str, *, header: bool = False
) -> bool:
    """Whether ``value``, assigned in ``text`` by ``sep`` to a name starting at
    ``start``, the value ending at ``end``, is code that computes a value, or no
    value at all. A ``header``'s line (``X-Api-Key: …``) calls nothing: a bracket in
    its value is the value's."""
    if not any(c.isalnum() for c in value):
        return True
    if sep[-1:] in "\"'":
        return _quoted_expression(value, text, start, end, sep)
    if value[0] in "([":  # a tuple or a list of what is judged as a value here
        return is_expression(value[1:], text, start, end, sep, header=header)
    field = _VARIABLE.match(value)  # a placeholder, then what closes the code around it
    if field is not None and not any(c.isalnum() for c in value[field.end() :]):
        return True
    if not header and _call(value, text, end):
        return True
    if _VARIABLE.fullmatch(value) or _KEYWORD_LEAD.match(value):
        return True
    if text[end : end + 1] in ("'", '"'):
        return value.lower() in _STRING_PREFIXES
    head = _HEAD.match(value)
    rest = "" if head is None else value[head.end() :]
    # After a bracket that closes the code around it, anything may follow: `key)[:n]`.
    if head is None or (rest[:1] not in tuple(")]}") and any(c.isalnum() for c in rest)):
        return False
    bare = head[0].rstrip(".")  # `cert.<span …>`: a member access markup cut short
    if _FILE_NAME.fullmatch(bare):
        return True
    if bare.isalpha() and _PROSE_AFTER.match(text, end):
        return True  # a word in a sentence: `key: cannot use "" as a name`
    if bare in _WORDS or _dotted(bare) or _SHORT_NUMBER.fullmatch(bare):
        return True
    return _NAME.fullmatch(bare) is not None and _code_name(bare, text, start, end, sep)


_CUT = frozenset("\"',;&<>\\")
"""What ends an unquoted value other than a space: a value ended by one is cut short."""


def _call(value: str, text: str, end: int) -> bool:
    """A call or a subscript: a name, then a bracket that closes, or whose contents go
    on past the value, ending at ``end`` of ``text``: cut at a quote or a comma
    (`input(` before `'Password: '`, `partition(b` before `':'`) or closed later on
    its line (`unquote(passwd or '')`); `ec(esMqzS`, never closed, is a password."""
    opened = _CALL.match(value)
    if opened is None:
        return False
    if opened.end() == len(value) or any(c in value for c in ")]"):
        return True
    if text[end : end + 1] in _CUT:
        return True
    line_end = text.find("\n", end, end + 200)
    rest_of_line = text[end : line_end if line_end >= 0 else end + 200]
    return ")" in rest_of_line or "]" in rest_of_line


def _quoted_expression(value: str, text: str, start: int, end: int, sep: str) -> bool:
    """``is_expression`` of a value in quotes: a string literal, or what follows one."""
    if start > 0 and text[start - 1] == sep[-1] and sep[0] != sep[-1]:
        return True  # the quote closes a quoted name: `"Set-Cookie:" line`, no value
    if len(value.strip()) < 4:
        return True  # a markup attribute's letter, `accesskey="n"`: no credential
    # What follows a quote that closed a string (`prompt='Password: ', x=1`) is
    # code, not a value; else a string literal is one unless an operator follows.
    closed = value.lstrip()[:1] in tuple(",)]};+%*")
    return closed or _OPERATOR_AFTER.match(text, end) is not None or _literal(value)


def _code_name(name: str, text: str, start: int, end: int, sep: str) -> bool:
    """Whether the name ``name`` assigned is a variable of code (module docstring)."""
    if any(c.isdigit() for c in name):
        return False  # `hunter2`, and a random token's shape
    if sep.strip() == ":" and _TYPE_NAME.fullmatch(name) and text[end : end + 1] in _AFTER_TYPE:
        return True  # an annotation: `private_key: CertificateIssuerPrivateKeyTypes,`
    if changes_case_randomly(name):
        return False  # changes of case more often than a camelCase name: `GQHiUkjkaPdFtHs`
    if "_" in name or (name.isupper() and len(name) > 1) or is_secret_name(name):
        return True
    keyword_argument = text[max(start - 1, 0) : start] == "(" or text[:start].endswith(", ")
    return (sep.startswith(" ") and sep.rstrip().endswith("=")) or keyword_argument
