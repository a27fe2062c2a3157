"""Write chitin tool plugins in Python.

A plugin is a module of typed functions, one per tool:

    from chitin_sdk import plugin, tool

    plugin("greeter", description="Greets people")

    @tool(read_only=True)
    def greet(name: str, times: int = 1) -> str:
        '''Say hello to someone.

        Args:
            name: Who to greet.
            times: How many times to say hello.
        '''
        return "\\n".join([f"Hello, {name}!"] * times)

`chitin plugin build` reads the type hints and docstrings to write the JSON
Schemas and the manifest (natively, with `python3`), then builds the
component with componentize-py. This file is the whole SDK; `chitin plugin
new` and `chitin plugin build` copy it next to the plugin. See
sdk/python/README.md.
"""

import dataclasses
import inspect
import json
import sys
import types
import typing

__all__ = ["plugin", "tool", "Context", "ToolError", "InvalidArgs", "Failed", "Denied"]


class ToolError(Exception):
    """A tool error the model reads; raise a subclass."""

    kind = "failed"


class InvalidArgs(ToolError):
    """The arguments do not make sense (say what to send instead)."""

    kind = "invalid-args"


class Failed(ToolError):
    """The tool ran and failed."""

    kind = "failed"


class Denied(ToolError):
    """The sandbox refused something (a path, a host)."""

    kind = "denied"


@dataclasses.dataclass
class Context:
    """Where a call comes from; a tool gets it by declaring `ctx: Context`."""

    session_key: str = "cli:test"
    channel: str = "cli"
    chat_id: str = "test"
    call_id: str = "call-1"

    def progress(self, text: str) -> None:
        """A short status for the user while the call runs (never sent to the model)."""
        _host_call("progress", text)

    def log(self, message: str, level: str = "info") -> None:
        """A line in the host's log: level is trace, debug, info, warn or error."""
        _host_call("log", message, level)


_PLUGIN = {}
_TOOLS = {}


def plugin(name, *, description="", version="0.1.0", workspace="none", network=()):
    """Names the plugin and asks for capabilities (the user's config grants them).

    workspace: "none", "read" or "read-write"; network: hosts for wasi:http.
    """
    _PLUGIN.update(name=name, description=description, version=version, workspace=workspace, network=list(network))


def tool(fn=None, *, name=None, read_only=False, concurrency_safe=False):
    """Makes a function a tool: `@tool` or `@tool(read_only=True, ...)`.

    The docstring's first paragraph is the tool's description; an `Args:`
    section gives each parameter's. Parameters with a default, or typed
    `Optional[...]`, are not required.
    """

    def register(fn):
        tool_name = name or fn.__name__
        if tool_name in _TOOLS:
            raise ValueError(f"two tools are named {tool_name!r}")
        _TOOLS[tool_name] = (fn, read_only, concurrency_safe)
        return fn

    return register(fn) if fn is not None else register


# --- schemas -------------------------------------------------------------

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(hint, where):
    """The JSON Schema of a type hint; `where` names it in errors."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is typing.Any or hint is inspect.Parameter.empty:
        return {}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _schema(rest[0], where)
        return {"anyOf": [_schema(a, where) for a in rest]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if hint is list or origin in (list, tuple, set, frozenset):
        items = _schema(args[0], where) if args else {}
        out = {"type": "array", "items": items}
        if origin in (set, frozenset):
            out["uniqueItems"] = True
        return out
    if hint is dict or origin is dict:
        out = {"type": "object"}
        if args:
            out["additionalProperties"] = _schema(args[1], where)
        return out
    raise TypeError(f"{where}: the type {hint!r} has no JSON Schema (use str, int, float, bool, list[...], dict[str, ...], Optional[...], Literal[...] or Any)")


def _docs(fn):
    """(description, {param: description}) from a docstring with an optional
    Google-style `Args:` section."""
    doc = inspect.getdoc(fn) or ""
    description, params, current, in_args = [], {}, None, False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if not stripped:
                continue
            if not line.startswith((" ", "\t")):
                in_args = False
            elif ":" in stripped and not line.startswith(("        ", "\t\t")):
                key, text = stripped.split(":", 1)
                current = key.split("(")[0].strip()
                params[current] = text.strip()
                continue
            elif current:
                params[current] = (params[current] + " " + stripped).strip()
                continue
        if not in_args:
            description.append(line)
    text = "\n".join(description).strip()
    return text.split("\n\n")[0].replace("\n", " ") if text else "", params


def _parameters(fn, tool_name):
    hints = typing.get_type_hints(fn)
    _, docs = _docs(fn)
    properties, required = {}, []
    for pname, param in inspect.signature(fn).parameters.items():
        hint = hints.get(pname, inspect.Parameter.empty)
        if hint is Context:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args and **kwargs are not supported")
        prop = _schema(hint, f"tool {tool_name}, parameter {pname}")
        if pname in docs:
            prop["description"] = docs[pname]
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)
        if param.default is not inspect.Parameter.empty:
            if param.default is not None:
                prop["default"] = param.default
        elif not optional:
            required.append(pname)
        properties[pname] = prop
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def manifest():
    """The plugin's manifest as a dict (what `chitin plugin build` embeds)."""
    if not _PLUGIN:
        raise RuntimeError('no plugin(...) call: add plugin("my-name", description="...") to the module')
    if not _TOOLS:
        raise RuntimeError("no @tool functions")
    tools = []
    for tool_name, (fn, read_only, concurrency_safe) in _TOOLS.items():
        description, _ = _docs(fn)
        tools.append({
            "name": tool_name,
            "description": description,
            "parameters": _parameters(fn, tool_name),
            "read_only": read_only,
            "concurrency_safe": concurrency_safe,
        })
    return {
        "manifest_version": 1,
        "name": _PLUGIN["name"],
        "version": _PLUGIN["version"],
        "description": _PLUGIN["description"],
        "tools": tools,
        "capabilities": {"workspace": _PLUGIN["workspace"], "network": _PLUGIN["network"], "host": []},
    }


# --- calls ---------------------------------------------------------------


def invoke(tool_name, args_json, ctx=None):
    """Runs a tool as the host does: by name, with JSON arguments. Returns the
    result text or raises a ToolError; any other exception becomes `Failed`
    with its type and message."""
    ctx = ctx or Context()
    entry = _TOOLS.get(tool_name)
    if entry is None:
        raise _UnknownTool(f"no tool {tool_name!r}; this plugin has: {', '.join(_TOOLS)}")
    fn = entry[0]
    try:
        args = json.loads(args_json)
    except ValueError as e:
        raise InvalidArgs(f"the arguments are not JSON: {e}") from None
    if not isinstance(args, dict):
        raise InvalidArgs("the arguments must be a JSON object")
    hints = typing.get_type_hints(fn)
    kwargs = {}
    for pname in inspect.signature(fn).parameters:
        if hints.get(pname) is Context:
            kwargs[pname] = ctx
        elif pname in args:
            kwargs[pname] = args[pname]
    try:
        result = fn(**kwargs)
    except ToolError:
        raise
    except PermissionError as e:
        raise Denied(f"{type(e).__name__}: {e}") from None
    except Exception as e:
        raise Failed(f"{type(e).__name__}: {e}") from None
    return result if isinstance(result, str) else json.dumps(result)


class _UnknownTool(ToolError):
    kind = "unknown-tool"


def _host_call(what, text, level="info"):
    """progress/log: the host's functions inside the component, stderr outside."""
    try:
        from wit_world.imports import host
    except ImportError:
        print(f"[{what}] {text}", file=sys.stderr)
        return
    if what == "progress":
        host.progress(text)
    else:
        host.log(getattr(host.LogLevel, level.upper(), host.LogLevel.INFO), text)


def _text(e):
    """str(e), which can itself raise (a broken __str__)."""
    try:
        return str(e)
    except Exception:
        return "an exception that cannot be shown"


def _export():
    """The class componentize-py instantiates for `chitin:plugin/tool`."""
    from componentize_py_types import Err
    from wit_world import exports
    from wit_world.imports import types as wit

    errors = {"unknown-tool": wit.ToolError_UnknownTool, "invalid-args": wit.ToolError_InvalidArgs, "failed": wit.ToolError_Failed, "denied": wit.ToolError_Denied}

    class Tool(exports.Tool):
        def invoke(self, name, args_json, ctx):
            context = Context(ctx.session_key, ctx.channel, ctx.chat_id, ctx.call_id)
            try:
                return invoke(name, args_json, context)
            except ToolError as e:
                raise Err(errors.get(e.kind, wit.ToolError_Failed)(_text(e))) from None
            except BaseException as e:  # never let the runtime abort on it
                raise Err(wit.ToolError_Failed(f"{type(e).__name__}: {_text(e)}")) from None

    return Tool

