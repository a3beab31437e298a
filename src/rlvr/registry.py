"""One tiny registry class. Every plug-in kind (task, reward, advantage estimator, loss, engine) has one.

A registered entry is a plain callable (function or class). Its keyword-only parameters are the knobs a
recipe may set; they are validated once, when the config is bound, so a typo or a wrong type fails before
any compute starts, with a message naming the key.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import pydantic

T = TypeVar("T", bound=Callable[..., Any])


class RegistryError(ValueError):
    """Unknown name or bad parameters for a registered component."""


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


# Every registry made, in creation order (`rlvr config show` lists the names plugins added to each), and the
# plugin whose import is running now (`rlvr.plugins` sets it), so a registration knows where it came from.
ALL_REGISTRIES: list[Registry[Any]] = []
_loading_plugin: list[str] = []


class Registry(Generic[T]):
    """Maps names to callables of one kind, and binds config parameters to them."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self.origins: dict[str, str] = {}  # name -> the plugin that registered it (built-ins are absent)
        ALL_REGISTRIES.append(self)

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                if _same_definition(self._entries[name], obj):
                    return obj  # the same plugin file imported again under another module name: keep the first
                raise RegistryError(f"{self.kind} '{name}' is already registered")
            self._entries[name] = obj
            module = getattr(obj, "__module__", None) or ""
            if _loading_plugin and module != "rlvr" and not module.startswith("rlvr."):  # not a built-in that
                self.origins[name] = _loading_plugin[-1]  # the plugin's import happened to load first
            return obj

        return decorator

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} '{name}'.{did_you_mean(name, self._entries)} "
                f"Available: {', '.join(self.names())}"
            ) from None

    def params_model(self, name: str) -> type[pydantic.BaseModel]:
        """A pydantic model of the entry's keyword-only parameters (the ones a config may set)."""
        return _params_model(self.get(name), f"{self.kind}:{name}")

    def resolve(self, name: str, params: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """Validate `params` for entry `name`; return the full parameter dict, defaults included."""
        try:
            model = self.params_model(name)
        except RegistryError as err:
            raise RegistryError(f"{where}.name: {err}" if where else str(err)) from None
        try:
            validated = model.model_validate(dict(params))
        except pydantic.ValidationError as err:
            raise RegistryError(_format_param_errors(err, model, where or self.kind)) from None
        return validated.model_dump()

    def bind(self, name: str, params: Mapping[str, Any] | None = None, where: str = "") -> Callable[..., Any]:
        """Return the entry with its config parameters bound (validated) as keyword arguments."""
        resolved = self.resolve(name, params or {}, where)
        return functools.partial(self.get(name), **resolved)

    def build(self, name: str, params: Mapping[str, Any] | None = None, where: str = "", **runtime: Any):
        """Call the entry with validated config parameters plus runtime-only arguments."""
        return self.bind(name, params, where)(**runtime)


def _same_definition(a: Any, b: Any) -> bool:
    """Two objects defined by the same source lines of the same file (a module imported twice)."""
    line = lambda obj: getattr(getattr(obj, "__code__", None), "co_firstlineno", None)  # noqa: E731
    try:
        return (inspect.getsourcefile(a) == inspect.getsourcefile(b) is not None
                and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None) and line(a) == line(b))
    except TypeError:
        return False


def _config_parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    target = fn.__init__ if inspect.isclass(fn) else fn
    sig = inspect.signature(target)
    return [p for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]


@functools.cache
def _params_model(fn: Callable[..., Any], label: str) -> type[pydantic.BaseModel]:
    target = fn.__init__ if inspect.isclass(fn) else fn
    hints = typing.get_type_hints(target, include_extras=True)
    fields: dict[str, Any] = {}
    for p in _config_parameters(fn):
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
    return pydantic.create_model(  # type: ignore[call-overload]
        label.replace(":", "_").replace("-", "_"),
        __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True),
        **fields,
    )


def _format_param_errors(err: pydantic.ValidationError, model: type[pydantic.BaseModel], where: str) -> str:
    return "\n".join(format_pydantic_errors(err, model, prefix=where))


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fields_at(schema: type[pydantic.BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model reached by following `loc` from `schema` (for 'valid keys' hints)."""
    model: Any = schema
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            break
        ann = field.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            if isinstance(cand, type) and issubclass(cand, pydantic.BaseModel):
                model = cand
                break
        else:
            break
    return list(getattr(model, "model_fields", {}))


def format_pydantic_errors(err: pydantic.ValidationError, schema: type[pydantic.BaseModel],
                           prefix: str = "") -> list[str]:
    """One line per problem: the dotted key, what was expected, and what was got."""
    problems: list[str] = []
    for e in err.errors():
        loc = tuple(e["loc"])
        parts = [prefix] if prefix else []
        key = ".".join(parts + [str(p) for p in loc if not isinstance(p, int)])
        for p in loc:  # list positions read as key[i]
            if isinstance(p, int):
                key = key + f"[{p}]"
        if e["type"] == "extra_forbidden":
            valid = _fields_at(schema, loc[:-1])
            lines = f"{key}: unknown key.{did_you_mean(str(loc[-1]), valid)} Valid keys here: {', '.join(valid)}"
            problems.append(lines)
        elif e["type"] == "missing":
            problems.append(f"{key}: required, but not given")
        elif e["type"] in ("value_error", "assertion_error"):
            msg = str(e.get("ctx", {}).get("error", e["msg"]))
            if loc:
                problems.append(f"{key}: {msg}; got {_describe(e.get('input'))}")
            else:  # a whole-config check: its message already names the keys
                problems.extend(f"{prefix}: {line}" if prefix else line for line in msg.splitlines())
        else:
            msg = e["msg"].replace("Input should be", "expected")
            problems.append(f"{key}: {msg}; got {_describe(e.get('input'))}")
    return problems
