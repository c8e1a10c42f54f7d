"""Options that belong to what they configure.

Each backend, client, resource, runtime, workload and fault descriptor may name the pydantic
model of its own options (`options="module:Model"`). A RunConfig keeps them by owner:
`backend_options`, `client_options`, `resource_options`, `runtime_options`, `workload_options`
and `fault_options` (fault name -> its options). `resolve` validates each against its owner's
model and keeps the result whole (defaults filled in, as JSON), so test.json records every
setting a run had (a client's as given: the client applies its own defaults); `typed` gives
them back as the model's values.

The flat options of earlier releases (`persistence`, `ssh_user`, `think_ms`, `pause_target`,
...) are aliases: `resolve` moves each to its owner (`LEGACY`), so old command lines, matrix
rows, API calls and test.json files still work. An alias its owner does not have is dropped
when it holds the old default (every earlier test.json recorded them all), and refused
otherwise. `--pause-target` sets `target` of every fault of the run that has one ("server" only
the pause fault has; the others then run at random, as they did).

A bad option is an `OptionError` naming the owner's flag and the field (`--fault-opt
pause.target`), one line and exit 3 in the CLI. `help_text` lists an owner's options for
`fencecheck run --help`, `config_schema` is `fencecheck schema config`.
"""

from __future__ import annotations

import functools
import importlib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import OWNERS
from fencecheck.nemesis.faults import registry as fault_registry
from fencecheck.nemesis.faults.base import FaultSettings
from fencecheck.run.errors import ConfigError

FIELD = {owner: f"{owner}_options" for owner in OWNERS}
FLAG = {owner: f"--{owner}-opt" for owner in OWNERS}
# The RunConfig field that names each owner, and its default.
SELECTOR = {"backend": "redis", "resource": "store", "runtime": "netns", "workload": "lock"}


class NoOptions(BaseModel):
    """The options of an owner that declares none: none may be given."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class Legacy:
    """A flat option of earlier releases: its owner, its field there, the default every earlier
    test.json recorded, and its command-line flag."""

    owner: str
    field: str
    default: Any
    flag: str


LEGACY: dict[str, Legacy] = {
    "persistence": Legacy("backend", "persistence", "off", "--persistence"),
    "hosts": Legacy("runtime", "hosts", (), "--hosts"),
    "ssh_user": Legacy("runtime", "user", "root", "--ssh-user"),
    "ssh_key": Legacy("runtime", "key", None, "--ssh-key"),
    "ssh_port": Legacy("runtime", "port", 22, "--ssh-port"),
    "sudo": Legacy("runtime", "sudo", False, "--sudo"),
    "ssh_accept_unknown": Legacy("runtime", "accept_unknown", False, "--ssh-accept-unknown"),
    "known_hosts": Legacy("runtime", "known_hosts", None, "--known-hosts"),
    "subnet": Legacy("runtime", "subnet", None, "--subnet"),
    "think_ms": Legacy("workload", "think_ms", 20.0, "--think-ms"),
    "writes_per_section": Legacy("workload", "writes_per_section", 3, "--writes"),
    "idle_ms": Legacy("workload", "idle_ms", 10.0, "idle_ms"),
    "acquire_timeout_s": Legacy("workload", "acquire_timeout_s", 5.0, "acquire_timeout_s"),
    "renew": Legacy("workload", "renew", False, "--renew"),
    "idempotent": Legacy("workload", "idempotent", False, "--idempotent"),
}
PAUSE_TARGET = Legacy("fault", "target", "holder", "--pause-target")  # every fault's target
ALIASES = (*LEGACY, "pause_target")


class OptionError(ConfigError):
    """A bad option of one owner. `str()` names it as a RunConfig has it (a matrix row, a
    test.json: `fault_options.pause.target`), `flag_message()` as the command line does
    (`--fault-opt pause.target`); each adds the alias it was given as, if any."""

    def __init__(self, owner: str, name: str, field: str, msg: str,
                 alias: Legacy | None = None, alias_key: str | None = None) -> None:
        self.owner, self.name, self.field, self.msg = owner, name, field, msg
        self.alias, self.alias_key = alias, alias_key
        super().__init__(self._text(f"{FIELD[owner]}.{self._path()}",
                                    f" (given as {alias_key})" if alias_key else ""))
        self.field = field  # the option's own field (ConfigError's is a RunConfig field)

    def _path(self) -> str:
        if self.owner == "fault":
            return f"{self.name}.{self.field}" if self.field else self.name
        return self.field or ""

    def _text(self, where: str, given: str) -> str:
        return f"bad configuration: {where}: {self.msg}{given}"

    def flag_message(self) -> str:
        given = f" (given as {self.alias.flag})" if self.alias and self.alias.flag[:2] == "--" \
            else ""
        return self._text(f"{FLAG[self.owner]} {self._path()}", given)


def _tables() -> dict[str, Callable[[], Mapping[str, Any]]]:
    return {"backend": catalog.backends, "client": catalog.clients,
            "resource": catalog.resources, "runtime": catalog.runtimes,
            "workload": catalog.workloads, "fault": fault_registry.faults}


def descriptors(owner: str) -> Mapping[str, Any]:
    return _tables()[owner]()


@functools.cache
def _load(spec: str) -> type[BaseModel]:
    module, _, attr = spec.partition(":")
    try:
        model = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise catalog.CatalogError(f"options model {spec} does not load: {e}") from None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise catalog.CatalogError(f"options model {spec} is not a pydantic model")
    return model


def model_for(owner: str, name: str) -> type[BaseModel] | None:
    """The options model of `name` (None: a client that checks none, any key goes through)."""
    d = descriptors(owner).get(name)
    spec = getattr(d, "options", None)
    if isinstance(spec, str):
        return _load(spec)
    if owner == "client":
        return None
    return FaultSettings if owner == "fault" else NoOptions


def validate(owner: str, name: str, given: Mapping[str, Any],
             aliases: Mapping[str, tuple[str, Legacy]] | None = None) -> dict[str, Any]:
    """`given` checked against `name`'s model, whole (defaults filled in), as JSON values."""
    model = model_for(owner, name)
    if model is None:
        return dict(given)
    aliases = aliases or {}
    fields = list(model.model_fields)
    for key in given:
        if key not in fields:
            has = f"it has {', '.join(fields)}" if fields else "it takes none"
            raise OptionError(owner, name, key, f"{owner} {name} has no such option ({has})",
                              *_alias(aliases, key))
    try:
        # a client's options as given: the client applies its own defaults (the comparison
        # names a row's client options, and only those the row set)
        return model.model_validate(dict(given)).model_dump(mode="json",
                                                            exclude_unset=owner == "client")
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "options"
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        if err["loc"] and isinstance(got, int | float | str) and str(got) not in msg:
            msg += f" (got {got!r})"  # what was typed, as for RunConfig's own fields
        raise OptionError(owner, name, key, msg,
                          *_alias(aliases, str(err["loc"][0]) if err["loc"] else "")) from None


def _alias(aliases: Mapping[str, tuple[str, Legacy]], key: str) -> tuple[Any, Any]:
    if key in aliases:
        alias_key, legacy = aliases[key]
        return legacy, alias_key
    return None, None


def typed(owner: str, name: str, dumped: Mapping[str, Any]) -> dict[str, Any]:
    """A RunConfig's options of `name` as its model's values (a Path as a Path)."""
    model = model_for(owner, name)
    if model is None:
        return dict(dumped)
    return dict(model.model_validate(dict(dumped)))


def _same(value: Any, default: Any) -> bool:
    return value == default or (isinstance(value, list) and tuple(value) == default)


def _fault_names(data: Mapping[str, Any]) -> list[str]:
    raw = data.get("nemesis", ("pause",))
    if isinstance(raw, str):
        raw = raw.split(",")
    known = fault_registry.faults()
    return [f.strip() for f in raw if isinstance(f, str) and f.strip() in known]


def _owner_names(data: Mapping[str, Any]) -> dict[str, str | None]:
    """The name of each owner the configuration picks, None where it names no known one."""
    out: dict[str, str | None] = {}
    for owner, default in SELECTOR.items():
        name = data.get(owner, default)
        out[owner] = name if isinstance(name, str) and name in descriptors(owner) else None
    client = data.get("client")
    backend = out["backend"]
    if client is None and backend is not None:
        client = catalog.backend(backend).default_client
    out["client"] = client if isinstance(client, str) else None
    return out


def _move_legacy(data: dict[str, Any], names: Mapping[str, str | None],
                 given: dict[str, dict[str, Any]],
                 aliases: dict[str, dict[str, tuple[str, Legacy]]]) -> None:
    """Each flat option of earlier releases into its owner's options (see the module doc)."""
    for key, legacy in LEGACY.items():
        if key not in data:
            continue
        value = data.pop(key)
        name = names[legacy.owner]
        if name is None:
            continue  # the owner's own name is wrong: that is the error to report
        model = model_for(legacy.owner, name)
        if model is not None and legacy.field not in model.model_fields:
            if _same(value, legacy.default):
                continue
            raise OptionError(legacy.owner, name, legacy.field,
                              f"{legacy.owner} {name} has no such option", legacy, key)
        if legacy.field in given[legacy.owner]:
            raise OptionError(legacy.owner, name, legacy.field,
                              f"given twice (as {legacy.flag} too)", legacy, key)
        given[legacy.owner][legacy.field] = value
        aliases[legacy.owner][legacy.field] = (key, legacy)


def _pause_target(value: Any, faults: list[str], given: dict[str, dict[str, Any]]) -> None:
    """--pause-target: every fault's `target`, where the fault has one ("server" where it can)."""
    for fault in faults:
        model = model_for("fault", fault)
        if model is None or "target" not in model.model_fields:
            continue
        target = value
        try:
            model.model_validate({"target": value})
        except ValidationError:
            if value != "server":
                raise OptionError("fault", fault, "target", f"not a target: {value!r}",
                                  PAUSE_TARGET, "pause_target") from None
            target = "random"
        given[fault].setdefault("target", target)


def resolve(data: Mapping[str, Any]) -> dict[str, Any]:
    """A RunConfig's input with every owner's options validated and whole, the legacy flat
    options moved to their owners; OptionError for a bad one."""
    out = dict(data)
    names = _owner_names(out)
    given = {o: dict(out.get(FIELD[o]) or {}) for o in OWNERS if o != "fault"}
    aliases: dict[str, dict[str, tuple[str, Legacy]]] = {o: {} for o in OWNERS}
    _move_legacy(out, names, given, aliases)
    faults = _fault_names(out)
    fault_given = {f: dict(v or {}) for f, v in (out.get("fault_options") or {}).items()}
    for fault in fault_given:
        if fault not in faults:
            raise OptionError("fault", fault, "", f"{fault} is not a fault of this run "
                              f"(--nemesis {','.join(faults) or 'none'})")
    fault_given = {f: fault_given.get(f, {}) for f in faults}
    if "pause_target" in out:
        _pause_target(out.pop("pause_target"), faults, fault_given)
    for owner, name in names.items():
        if name is not None:
            out[FIELD[owner]] = validate(owner, name, given[owner], aliases[owner])
    out["fault_options"] = {f: validate("fault", f, v, {"target": ("pause_target", PAUSE_TARGET)}
                                        if "pause_target" in data else None)
                            for f, v in fault_given.items()}
    return out


def warnings(cfg: Any) -> list[str]:
    """What the run's options' models warn of before it starts (a model's `warnings()`)."""
    out: list[str] = []
    for owner in OWNERS:
        for name, values in _owned(cfg, owner):
            model = model_for(owner, name)
            check = getattr(model, "warnings", None) if model is not None else None
            if check is not None:
                out += model.model_validate(values).warnings()  # type: ignore[union-attr]
    return out


def _owned(cfg: Any, owner: str) -> list[tuple[str, dict[str, Any]]]:
    if owner == "fault":
        return list(cfg.fault_options.items())
    name = cfg.client_name if owner == "client" else getattr(cfg, owner)
    return [(name, getattr(cfg, FIELD[owner]))]


# ---- what the CLI and the schema show ------------------------------------------------------


def _type_text(annotation: Any) -> str:
    """How --help shows a field's type."""
    if typing.get_origin(annotation) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return _type_text(args[0]) if len(args) == 1 else "|".join(map(_type_text, args))
    if typing.get_origin(annotation) is tuple:
        return "LOW,HIGH" if len(args) == 2 and args[1] is not Ellipsis else "A,B,..."
    names = {bool: "true|false", int: "N", float: "N", str: "TEXT", Path: "PATH"}
    return names.get(annotation, getattr(annotation, "__name__", "VALUE"))


def field_text(name: str, info: Any) -> str:
    """`name=TYPE (default X)` of one field of an options model."""
    default = info.get_default(call_default_factory=True)
    if isinstance(default, bool):
        default = str(default).lower()
    elif isinstance(default, tuple):  # as it is typed: A,B,...
        default = ",".join(map(str, default))
    shown = "" if default in (None, ()) else f" (default {default})"
    return f"{name}={_type_text(info.annotation)}{shown}"


def help_text(owner: str) -> str:
    """`NAME[, NAME...]: field=TYPE (default X), ...; ...` for every `owner` with options,
    those sharing one model together."""
    groups: dict[type[BaseModel], list[str]] = {}
    for name in descriptors(owner):
        model = model_for(owner, name)
        if model is not None and model.model_fields:
            groups.setdefault(model, []).append(name)
    return "; ".join(f"{', '.join(names)}: "
                     + ", ".join(field_text(f, i) for f, i in model.model_fields.items())
                     for model, names in groups.items())


def config_schema(base: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a run's configuration (`base`: RunConfig's own) with each owner's
    options: `<owner>_options` is the model of the owner the configuration names."""
    defs = base.setdefault("$defs", {})
    rules: list[dict[str, Any]] = []
    props = base.setdefault("properties", {})
    for owner in OWNERS:
        selector = owner
        for name in descriptors(owner):
            model = model_for(owner, name)
            if model is None:
                continue
            key = f"{owner}.{name}"
            schema = model.model_json_schema()
            defs.update(schema.pop("$defs", {}))
            defs[key] = schema
            if owner == "fault":
                continue
            rules.append({"if": {"properties": {selector: {"const": name}},
                                 "required": [selector]},
                          "then": {"properties": {FIELD[owner]: {"$ref": f"#/$defs/{key}"}}}})
    props["fault_options"] = {
        "type": "object", "additionalProperties": False,
        "description": "each fault of the run: its options",
        "properties": {f: {"$ref": f"#/$defs/fault.{f}"} for f in descriptors("fault")}}
    base["allOf"] = rules
    return base
