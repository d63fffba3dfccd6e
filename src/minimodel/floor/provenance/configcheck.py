"""The workflow's config checked against its schema, one line per problem.

Snakemake's `validate()` prints jsonschema's whole report, the schema and the config with it
(633 lines for one misspelled key). `check_config` says the same in a line that names the key,
the bad value and what the schema accepts; `check_yaml_syntax` names the file and line of a YAML
syntax error, which Snakemake's loader drops.

The schema sets no defaults (config/config.yaml holds every one, and is always loaded first), so
unlike Snakemake's `validate(set_default=True)` nothing is filled in here.

    python -m minimodel.floor.provenance.configcheck my.yaml   # check a config before a run

`load_config` gives code outside the workflow (tools/, `python -m minimodel.symbolic`) the config
a run would get: the project's config/config.yaml, each --configfile over it, validated.
"""

from __future__ import annotations

import difflib
import json
import os
import reprlib
import sys
from pathlib import Path

import jsonschema
import yaml

from minimodel.floor.provenance import project

SCHEMA = project.root() / project.SCHEMA


class ConfigError(ValueError):
    """A config that the schema refuses, or a config file that is not YAML; one line per problem."""


def _is_integer(_checker, value) -> bool:
    # JSON Schema counts 64.0 as an integer; torch.randn, range and the kernel's grid do not.
    return isinstance(value, int) and not isinstance(value, bool)


Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))

# A bad value shown in a line, however large (Repr takes these as arguments only from 3.12).
_short = reprlib.Repr()
_short.maxlevel, _short.maxlist, _short.maxdict, _short.maxstring = 2, 4, 3, 40


def check_config(config: dict, schema: dict | str | os.PathLike = SCHEMA) -> None:
    """Raise ConfigError, one line per problem, when `config` does not satisfy `schema`."""
    if not isinstance(schema, dict):
        schema = yaml.safe_load(Path(schema).read_text())
    Validator.check_schema(schema)
    problems = []
    for error in sorted(Validator(schema).iter_errors(config), key=lambda e: _key(e.absolute_path)):
        for line in _lines(error, schema):
            if line not in problems:
                problems.append(line)
    if problems:
        raise ConfigError("\n".join(problems))


def _key(path) -> str:
    """A key path as a user writes it: gpu.correctness.n[0]."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f"{'.' if out else ''}{part}"
    return out


def _lines(error: jsonschema.ValidationError, root: dict) -> list[str]:
    where = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        keys = f"the keys of {where} are" if where else "the top-level keys are"
        lines = []
        for name in (k for k in error.instance if k not in known):
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = (f"did you mean {_key([*error.absolute_path, close[0]])!r}?" if close
                    else "no known key is close")
            lines.append(f"config: unknown key {_key([*error.absolute_path, name])!r} ({hint}); "
                         f"{keys} {', '.join(known)}")
        return lines
    if error.validator == "pattern" and "description" in error.schema:  # its form, in words
        return [f"config: {where} is {_short.repr(error.instance)}; accepted: "
                f"{error.schema['description']}"]
    return [f"config: {where or 'the config'} is {_short.repr(error.instance)}; "
            f"accepted: {accepted(error.schema, root)}"]


def _resolve(schema: dict, root: dict) -> dict:
    """`schema` with its local $ref (#/definitions/...) followed: the only kind this schema uses."""
    while "$ref" in schema:
        node = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _plain(value) -> str:
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def accepted(schema: dict, root: dict) -> str:
    """What `schema` accepts, in words: "an integer from 1 to 1048576"."""
    schema = _resolve(schema, root)
    if "enum" in schema:
        return "one of " + ", ".join(_plain(v) for v in schema["enum"])
    types = schema.get("type", [])
    words = []
    for kind in [types] if isinstance(types, str) else types:
        if kind in ("integer", "number"):
            words.append(("an integer" if kind == "integer" else "a number") + _bounds(schema))
        elif kind == "string":
            words.append("a non-empty string" if schema.get("minLength", 0) >= 1 else "a string")
        elif kind == "boolean":
            words.append("true or false")
        elif kind == "null":
            words.append("null")
        elif kind == "array":
            words.append(_list(schema, root))
        elif kind == "object":
            words.append("a mapping of " + ", ".join(schema.get("properties", {})))
    return " or ".join(words) or json.dumps(schema)


def _bounds(schema: dict) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if "exclusiveMinimum" in schema:
        return f" > {schema['exclusiveMinimum']}" + (f" and <= {high}" if high is not None else "")
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" >= {low}"
    return f" <= {high}" if high is not None else ""


def _list(schema: dict, root: dict) -> str:
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    if low == high:
        size = f"a list of {low} items"
    elif high is not None:
        size = f"a list of {low} to {high} items"
    else:
        size = "a non-empty list" if low == 1 else f"a list of at least {low} items" if low else "a list"
    return size + (f", each {accepted(schema['items'], root)}" if "items" in schema else "")


def check_yaml_syntax(path: str | os.PathLike) -> None:
    """Raise ConfigError naming `path`, the line and the column of a YAML syntax error.

    Snakemake's loader (JSON first, then YAML) says only "not valid JSON or YAML". Only the
    syntax is checked (yaml.compose builds no objects), so what Snakemake accepts passes.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        json.loads(text)
        return
    except ValueError:
        pass
    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        context = f" ({err.context}, line {err.context_mark.line + 1})" if err.context_mark else ""
        raise ConfigError(f"{path}, line {mark.line + 1}, column {mark.column + 1}: not valid "
                          f"YAML: {err.problem}{context}") from None


def load_config(*configfiles: str | os.PathLike) -> dict:
    """The config a run of the workflow gets, for code that runs outside it (the tools).

    The project's config/config.yaml, then each of `configfiles` over it, key by key (as
    `snakemake --configfile A B` merges them), checked against the schema like the workflow's.
    Raises ConfigError naming the file and line of a YAML error, or one line per refused key.
    """
    config: dict = {}
    for path in [project.root() / project.CONFIG, *configfiles]:
        check_yaml_syntax(path)
        _update(config, yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})
    check_config(config)
    return config


def main(argv: list[str] | None = None) -> int:
    """Check config files as a run would: YAML syntax, then config.yaml's defaults with each
    file over them, against the schema. Prints one line per problem; exit status 1 on any."""
    files = sys.argv[1:] if argv is None else argv
    try:
        load_config(*files)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


def _update(config: dict, other: dict) -> None:
    """Nested keys of `other` over `config`, as Snakemake merges config files."""
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            _update(config[key], value)
        else:
            config[key] = value


if __name__ == "__main__":
    sys.exit(main())
