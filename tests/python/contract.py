"""Checks the Python side against the JSON Schemas the Rust types generate (`schema/`).

Usage:
  contract.py spec schema/worker-spec.schema.json < EXAMPLES   (one worker spec a line)
  contract.py events schema/events.schema.json < EVENTS        (one event a line)
  contract.py emitted schema/events.schema.json                (reads python/iteragpu's source)

`spec`: for each workload of the schema, `iteragpu.spec`'s dataclasses read the same keys, require
none the schema lets Rust omit, and expect every JSON type the schema allows; then each example is
valid against the schema. `events`: each line is valid; prints the event types seen. `emitted`:
the event types the worker's source emits by name (`emit("note", …)`) are the schema's, both ways.

Standard library only (the CLI's tests need nothing but python3): `validate` is a small validator
of the JSON Schema keywords schemars writes, and refuses any other keyword rather than ignore it.
"""

from __future__ import annotations

import json
import re
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from iteragpu import spec as specs

# Keywords that only annotate (JSON Schema 2020-12): they never make a document invalid.
ANNOTATIONS = {"$schema", "$defs", "title", "description", "default", "format", "examples"}
TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class Invalid(Exception):
    """Where a document breaks its schema, and how."""


def resolve(root: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#/"):
        raise Invalid(f"only local references are followed, not {ref}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def validate(value: Any, schema: Any, root: dict[str, Any], at: str = "$") -> None:
    """Raises Invalid naming the first place where `value` breaks `schema`."""
    if schema is True:
        return
    if schema is False:
        raise Invalid(f"{at}: nothing is allowed here")
    unknown = set(schema) - ANNOTATIONS - CHECKS.keys()
    if unknown:
        raise Invalid(f"{at}: the schema uses {sorted(unknown)}, which this small validator does not check")
    for keyword, check in CHECKS.items():
        if keyword in schema:
            check(value, schema, root, at)


def _ref(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    validate(value, resolve(root, schema["$ref"]), root, at)


def _type(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    allowed = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not any(TYPES[t](value) for t in allowed):
        raise Invalid(f"{at}: {json.dumps(value)[:80]} is not {' or '.join(allowed)}")


def _enum(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if value not in schema["enum"]:
        raise Invalid(f"{at}: {value!r} is none of {schema['enum']}")


def _const(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if value != schema["const"]:
        raise Invalid(f"{at}: {value!r} is not {schema['const']!r}")


def _minimum(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if TYPES["number"](value) and value < schema["minimum"]:
        raise Invalid(f"{at}: {value} is below {schema['minimum']}")


def _properties(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, dict):
        for key, sub in schema["properties"].items():
            if key in value:
                validate(value[key], sub, root, f"{at}.{key}")


def _required(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, dict):
        missing = [k for k in schema["required"] if k not in value]
        if missing:
            raise Invalid(f"{at}: lacks {', '.join(missing)}")


def _additional(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, dict):
        for key in set(value) - set(schema.get("properties", {})):
            validate(value[key], schema["additionalProperties"], root, f"{at}.{key}")


def _items(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, list):
        for i, item in enumerate(value[len(schema.get("prefixItems", [])) :]):
            validate(item, schema["items"], root, f"{at}[{i}]")


def _prefix_items(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, list):
        for i, (item, sub) in enumerate(zip(value, schema["prefixItems"])):
            validate(item, sub, root, f"{at}[{i}]")


def _min_items(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, list) and len(value) < schema["minItems"]:
        raise Invalid(f"{at}: fewer than {schema['minItems']} items")


def _max_items(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    if isinstance(value, list) and len(value) > schema["maxItems"]:
        raise Invalid(f"{at}: more than {schema['maxItems']} items")


def _passing(value: Any, options: list[Any], root: dict[str, Any], at: str) -> tuple[int, list[str]]:
    passed, why = 0, []
    for sub in options:
        try:
            validate(value, sub, root, at)
            passed += 1
        except Invalid as exc:
            why.append(str(exc))
    return passed, why


def _any_of(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    passed, why = _passing(value, schema["anyOf"], root, at)
    if not passed:
        raise Invalid(f"{at}: matches no choice ({'; '.join(why)})")


def _one_of(value: Any, schema: Any, root: dict[str, Any], at: str) -> None:
    passed, why = _passing(value, schema["oneOf"], root, at)
    if passed != 1:
        raise Invalid(f"{at}: matches {passed} choices, not one ({'; '.join(why)})")


CHECKS = {
    "$ref": _ref,
    "type": _type,
    "enum": _enum,
    "const": _const,
    "minimum": _minimum,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
    "items": _items,
    "prefixItems": _prefix_items,
    "minItems": _min_items,
    "maxItems": _max_items,
    "anyOf": _any_of,
    "oneOf": _one_of,
}


def json_types(schema: Any, root: dict[str, Any]) -> set[str]:
    """The JSON types a value of `schema` may have."""
    if "$ref" in schema:
        return json_types(resolve(root, schema["$ref"]), root)
    for choice in ("anyOf", "oneOf"):
        if choice in schema:
            return set().union(*(json_types(s, root) for s in schema[choice]))
    if "type" in schema:
        return set(schema["type"] if isinstance(schema["type"], list) else [schema["type"]])
    if "enum" in schema or "const" in schema:
        return {type_name(v) for v in schema.get("enum", [schema.get("const")])}
    return set(TYPES)


def type_name(value: Any) -> str:
    return next(t for t in ("null", "boolean", "integer", "number", "string", "array", "object") if TYPES[t](value))


def python_types(hint: Any) -> set[str]:
    """The JSON types a dataclass field's annotation expects."""
    if typing.get_origin(hint) is typing.Union:
        return set().union(*(python_types(a) for a in typing.get_args(hint)))
    if typing.get_origin(hint) in (tuple, list):
        return {"array"}
    if typing.get_origin(hint) is dict:
        return {"object"}
    known = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string", dict: "object"}
    return {known[hint]} if hint in known else set(TYPES)


def spec_fields(cls: type) -> dict[str, tuple[bool, set[str]]]:
    """The keys `spec.parse` reads for one workload: key → (required, the JSON types expected)."""
    keys: dict[str, tuple[bool, set[str]]] = {}
    for f in fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        if f.name in specs._NESTED:
            nested, extra = specs._NESTED[f.name]
            for name in extra:
                keys[name] = (False, set(TYPES))
            for g in fields(nested):
                keys[g.name] = (False, python_types(typing.get_type_hints(nested)[g.name]))
        else:
            required = f.default is MISSING and f.default_factory is MISSING
            keys[f.name] = (required, python_types(hint))
    return keys


def schema_fields(root: dict[str, Any], variant: dict[str, Any]) -> dict[str, tuple[bool, set[str]]]:
    """The keys the schema gives one workload: the shared ones and the variant's own."""
    keys: dict[str, tuple[bool, set[str]]] = {}
    for part in (root, variant, resolve(root, variant["$ref"])):
        for key, sub in part.get("properties", {}).items():
            if key != "workload":
                keys[key] = (key in part.get("required", []), json_types(sub, root))
    return keys


def check_spec(schema: dict[str, Any], lines: list[str]) -> list[str]:
    said, wrong = [], []
    for variant in schema["oneOf"]:
        kind = variant["properties"]["workload"]["const"]
        theirs, ours = schema_fields(schema, variant), spec_fields(specs.WORKLOADS[kind])
        for key in sorted(set(theirs) | set(ours)):
            if key not in ours:
                wrong.append(f"workload {kind}: spec.py does not read `{key}`, which the schema has")
            elif key not in theirs:
                wrong.append(f"workload {kind}: spec.py reads `{key}`, which the schema lacks")
            elif ours[key][0] and not theirs[key][0]:
                wrong.append(f"workload {kind}: spec.py requires `{key}`, which Rust may omit")
            elif not theirs[key][1] <= ours[key][1]:
                wrong.append(f"workload {kind}: `{key}` may be {sorted(theirs[key][1] - ours[key][1])}, which spec.py does not expect")
        said.append(f"workload {kind}: spec.py's keys are the schema's")
    for line in lines:
        try:
            validate(json.loads(line), schema, schema)
        except Invalid as exc:
            wrong.append(f"example {line[:60]}…: {exc}")
    said.append(f"{len(lines)} examples valid")
    if wrong:
        raise SystemExit("\n".join(wrong))
    return said


def check_events(schema: dict[str, Any], lines: list[str]) -> list[str]:
    seen, wrong = set(), []
    for line in lines:
        event = json.loads(line)
        try:
            validate(event, schema, schema)
            seen.add(event["type"])
        except Invalid as exc:
            wrong.append(f"{line[:120]}: {exc}")
    if wrong:
        raise SystemExit("\n".join(wrong))
    return sorted(seen)


# An event sent by name in the worker's source: `channel.emit("note", …)`, `self._emit(\n "alloc"`, a question `ask("hub_query", …)`.
EMIT = re.compile(r'\b_?(?:emit|events|ask)\(\s*"([a-z_]+)"')


def check_emitted(schema: dict[str, Any], lines: list[str]) -> list[str]:
    package = Path(specs.__file__).parent
    emitted = {m for path in package.rglob("*.py") for m in EMIT.findall(path.read_text(encoding="utf-8"))}
    known = {variant["properties"]["type"]["const"] for variant in schema["oneOf"]}
    wrong = [f"the worker emits `{t}`, which the schema lacks" for t in sorted(emitted - known)]
    wrong += [f"the schema has `{t}`, which the worker never emits by name" for t in sorted(known - emitted)]
    if wrong:
        raise SystemExit("\n".join(wrong))
    return sorted(emitted)


def check_categories(schema: dict[str, Any], lines: list[str]) -> list[str]:
    """The tracker's `Category` enum (read from its source with `ast`: no torch needed) holds
    exactly the words the schema's `Category` allows."""
    import ast

    source = (Path(specs.__file__).parent / "predict" / "tracker.py").read_text(encoding="utf-8")
    enum = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "Category")
    ours = {
        stmt.value.value
        for stmt in enum.body
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
    }
    theirs: set[str] = set()
    for variant in schema["$defs"]["Category"]["oneOf"]:
        theirs |= set(variant.get("enum", [])) | ({variant["const"]} if "const" in variant else set())
    wrong = [f"tracker.py's Category has `{c}`, which the schema lacks" for c in sorted(ours - theirs)]
    wrong += [f"the schema's Category has `{c}`, which tracker.py's lacks" for c in sorted(theirs - ours)]
    if wrong:
        raise SystemExit("\n".join(wrong))
    return sorted(ours)


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)
    lines = [] if what in ("emitted", "categories") else [line for line in sys.stdin.read().splitlines() if line.strip()]
    check = {"spec": check_spec, "events": check_events, "emitted": check_emitted, "categories": check_categories}[what]
    print("\n".join(check(schema, lines)))


if __name__ == "__main__":
    main()
