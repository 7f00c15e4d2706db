"""Job configuration: TOML files in ``conf/`` checked against a declared schema, with
command-line overrides (``--set section.key=value``).

Every mistake fails at start with a message naming the key and what is allowed: an unknown
section or key (with the closest known name), a value of the wrong type, a number out of range,
a choice that is not among the allowed ones.

>>> schema = {"job": {"duration_s": Key(float, 60.0, low=0, low_open=True),
...                   "mode": Key(str, "fast", choices=("fast", "safe"))}}
>>> load_config(schema, text="[job]\\nduration_s = 10", overrides=["job.mode=safe"])
{'job': {'duration_s': 10.0, 'mode': 'safe'}}
>>> load_config(schema, text="[job]\\nduraton_s = 10")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sparkqos.errors.ConfigError: <config>: unknown key 'job.duraton_s' (did you mean 'duration_s'?); allowed keys ...
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkqos.errors import ConfigError, check_number


@dataclass(frozen=True)
class Key:
    """One configuration key: its type, default and constraints.

    ``type`` is int, float, str, bool, list (a list of strings, or of components: a name or a
    ``{name = "cqc", params = {k = 3.0}}`` table, the shape of a strategy nested in another) or
    dict (a table of names to strings or numbers, ``{H = "500ms", N = 30}``; on the command line
    ``H:500ms,N:30``).
    ``choices`` may be a tuple or a callable returning the allowed values (e.g. the strategy
    registry, read when checked); a table's ``name`` is what is checked.
    """

    type: type
    default: Any
    help: str = ""
    choices: tuple | Callable[[], Iterable[str]] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    optional: bool = False  # None allowed

    def allowed(self) -> list[str] | None:
        if self.choices is None:
            return None
        return list(self.choices() if callable(self.choices) else self.choices)


def _suggest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _coerce(source: str, name: str, key: Key, value: Any) -> Any:
    where = f"{source}: {name}"
    if value is None:
        if key.optional:
            return None
        raise ConfigError(f"{where} may not be empty")
    if key.type is bool:
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
    elif key.type in (int, float):
        if isinstance(value, str):
            try:
                value = key.type(value)
            except ValueError:
                raise ConfigError(f"{where} must be a number, got {value!r}") from None
        if key.type is int and isinstance(value, float) and value.is_integer():
            value = int(value)  # 3.0 is the whole number 3
        check_number(
            name,
            value,
            low=key.low,
            low_open=key.low_open,
            high=key.high,
            integer=key.type is int,
            error=ConfigError,
            where=f"{source}: ",
        )
        value = key.type(value)
    elif key.type is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
    elif key.type is dict:
        if isinstance(value, str):
            pairs = [p.split(":", 1) for p in value.split(",") if p.strip()]
            if any(len(p) != 2 for p in pairs):
                raise ConfigError(f"{where} must be name:value pairs separated by commas, got {value!r}")
            value = {k.strip(): v.strip() for k, v in pairs}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in value.items()
        ):
            raise ConfigError(f'{where} must be a table of names to values, such as {{H = "500ms"}}, got {value!r}')
    elif key.type is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) or _is_table(v) for v in value):
            raise ConfigError(f"{where} must be a list of names or {{name = ..., params = {{...}}}} tables, got {value!r}")
    allowed = key.allowed()
    if allowed is not None:
        for v in value if isinstance(value, list) else [value]:
            v = v["name"] if _is_table(v) else v
            if v not in allowed:
                raise ConfigError(
                    f"{where} = {v!r} is not allowed{_suggest(str(v), allowed)}; "
                    f"allowed values are: {', '.join(map(str, allowed))}"
                )
    return value


def _is_table(value: Any) -> bool:
    """A component table: ``{name = "...", params = {...}}`` (``params`` optional)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("params", {}), dict)
        and set(value) <= {"name", "params"}
    )


def _parse_override(text: str) -> tuple[str, str, Any]:
    path, sep, raw = text.partition("=")
    section, dot, name = path.strip().partition(".")
    if not sep or not dot or not section or not name:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return section, name, value


def load_config(
    schema: Mapping[str, Mapping[str, Key]],
    path: str | Path | None = None,
    text: str | None = None,
    overrides: Iterable[str] = (),
) -> dict[str, dict[str, Any]]:
    """Read ``path`` (or ``text``), apply ``overrides`` and check everything against ``schema``.
    Keys left out take their defaults."""
    source = str(path) if path is not None else "<config>"
    doc: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read configuration {source!r}: {exc.strerror or exc}") from None
    if text:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    for sec_name, section in doc.items():
        if sec_name not in schema:
            raise ConfigError(
                f"{source}: unknown section [{sec_name}]{_suggest(sec_name, schema)}; allowed sections are: {', '.join(schema)}"
            )
        if not isinstance(section, dict):
            raise ConfigError(f"{source}: [{sec_name}] must be a table")
    for text_override in overrides:
        sec_name, name, value = _parse_override(text_override)
        if sec_name not in schema:
            raise ConfigError(
                f"override {text_override!r}: unknown section {sec_name!r}{_suggest(sec_name, schema)}; "
                f"allowed sections are: {', '.join(schema)}"
            )
        doc.setdefault(sec_name, {})[name] = value
    out: dict[str, dict[str, Any]] = {}
    for sec_name, keys in schema.items():
        given = doc.get(sec_name, {})
        for name in given:
            if name not in keys:
                raise ConfigError(
                    f"{source}: unknown key '{sec_name}.{name}'{_suggest(name, keys)}; "
                    f"allowed keys in [{sec_name}] are: {', '.join(keys)}"
                )
        out[sec_name] = {
            name: _coerce(source, f"{sec_name}.{name}", key, given[name]) if name in given else key.default
            for name, key in keys.items()
        }
    return out


def describe(schema: Mapping[str, Mapping[str, Key]]) -> str:
    """A listing of every key with its default, for ``--help`` texts."""
    lines = []
    for sec_name, keys in schema.items():
        lines.append(f"[{sec_name}]")
        for name, key in keys.items():
            allowed = key.allowed()
            extra = f" (one of: {', '.join(map(str, allowed))})" if allowed else ""
            lines.append(f"  {name} = {key.default!r}  {key.help}{extra}")
    return "\n".join(lines)
