"""SPDK's client-side ``save_config`` / ``load_config`` algorithms.

The configuration format is SPDK's::

    {"subsystems": [{"subsystem": NAME, "config": [{"method": M, "params": {...}}, ...] | null}, ...]}

``save_config`` asks the server for its subsystems in initialisation order
(``framework_get_subsystems``) and for each one's configuration (``framework_get_config``).

``load_config`` replays a saved configuration: every method named in it must exist on the
server (checked before anything is called); then, in rounds, every entry callable in the
server's current RPC state is called in file order, ``framework_start_init`` is called when
it is callable, until a round makes no progress. Entries left over because the server's
state has moved past them (STARTUP-only setters on a running target) are skipped, as SPDK
does; :func:`load_config` returns them. The first RPC error aborts the load.
"""

import json
from typing import Any, Dict, Iterable, List, Optional, Set

from .client import RtgtError


class ConfigError(RtgtError):
    """A configuration could not be loaded (malformed, or names unknown methods)."""


def save_config(
    client: Any, subsystems: Optional[Iterable[str]] = None, with_batches: bool = False
) -> Dict[str, Any]:
    """The server's configuration as a dict in SPDK's format.

    ``subsystems`` restricts the output to the named subsystems plus everything they depend
    on (rpc.py ``save_config -s a,b``); unknown names raise :class:`ConfigError`.
    """
    listing = client.call("framework_get_subsystems")
    if not isinstance(listing, list):
        raise ConfigError(f"framework_get_subsystems returned {listing!r}, not a list")
    closure: Dict[str, Set[str]] = {}
    for entry in listing:
        name = entry["subsystem"]
        deps = {name}
        for d in entry.get("depends_on", []):
            deps |= closure.get(d, {d})
        closure[name] = deps
    if subsystems is None:
        wanted = set(closure)
    else:
        wanted = set()
        for name in subsystems:
            if name not in closure:
                raise ConfigError(f"unknown subsystem '{name}'")
            wanted |= closure[name]
    out: Dict[str, Any] = {"subsystems": []}
    for entry in listing:
        name = entry["subsystem"]
        if name in wanted:
            out["subsystems"].append(
                {"subsystem": name, "config": save_subsystem_config(client, name, with_batches)}
            )
    return out


def save_subsystem_config(client: Any, name: str, with_batches: bool = False) -> Any:
    """One subsystem's configuration entries (``framework_get_config``)."""
    return client.call("framework_get_config", {"name": name, "with_batches": with_batches})


def dumps(config: Any, indent: Optional[int] = 2) -> str:
    """Formats a configuration as rpc.py does: indent 2 by default, compact when ``indent``
    is negative, followed by a newline."""
    if indent is not None and indent < 0:
        indent = None
    return json.dumps(config, indent=indent) + "\n"


def _entries(config: Any, where: str) -> List[Dict[str, Any]]:
    """Flattens a subsystem's config list (entries may themselves be batch arrays)."""
    if config is None:
        return []
    if not isinstance(config, list):
        raise ConfigError(f"{where}: 'config' must be a list or null")
    out: List[Dict[str, Any]] = []
    for item in config:
        for elem in item if isinstance(item, list) else [item]:
            if not isinstance(elem, dict) or not isinstance(elem.get("method"), str):
                raise ConfigError(f"{where}: every entry needs a 'method' string: {elem!r}")
            out.append(elem)
    return out


def _parse(config: Any) -> List[Dict[str, Any]]:
    if isinstance(config, (str, bytes)):
        try:
            config = json.loads(config)
        except ValueError as e:
            raise ConfigError(f"configuration is not valid JSON: {e}") from e
    if not isinstance(config, dict) or not isinstance(config.get("subsystems"), list):
        raise ConfigError("configuration needs a 'subsystems' list")
    subs = []
    for i, sub in enumerate(config["subsystems"]):
        if not isinstance(sub, dict) or "subsystem" not in sub:
            raise ConfigError(f"subsystems[{i}] needs a 'subsystem' name")
        entries = _entries(sub.get("config"), f"subsystem '{sub['subsystem']}'")
        if entries:
            subs.append({"subsystem": sub["subsystem"], "config": entries})
    return subs


def load_config(client: Any, config: Any, include_aliases: bool = False) -> List[Dict[str, Any]]:
    """Applies a configuration (dict, or JSON text) the way rpc.py's ``load_config`` does.

    Returns the entries that were skipped because the server's RPC state had passed the
    state they need (empty when everything was applied). Raises :class:`ConfigError`
    before calling anything if an entry names a method the server does not have, and
    :class:`~rtgt.RpcError` for the first call that fails.
    """
    subsystems = _parse(config)
    known = client.call("rpc_get_methods", {"include_aliases": include_aliases})
    if not subsystems:
        if "framework_start_init" in _current(client, include_aliases):
            client.call("framework_start_init")
        return []
    unknown = sorted(
        {e["method"] for s in subsystems for e in s["config"] if e["method"] not in known}
    )
    if unknown:
        raise ConfigError(
            "Unknown method was included in the config file: " + ", ".join(unknown)
        )
    while subsystems:
        callable_now = _current(client, include_aliases)
        progress = False
        for sub in list(subsystems):
            remaining = []
            for elem in sub["config"]:
                if elem["method"] in callable_now:
                    client.call(elem["method"], elem.get("params"))
                    progress = True
                else:
                    remaining.append(elem)
            sub["config"] = remaining
            if not remaining:
                subsystems.remove(sub)
        if "framework_start_init" in callable_now:
            client.call("framework_start_init")
            progress = True
        if not progress:
            break
    return [e for s in subsystems for e in s["config"]]


def load_subsystem_config(client: Any, config: Any) -> None:
    """Applies one ``{"subsystem": ..., "config": [...]}`` object in a single pass, calling
    only what the server's current state allows (rpc.py ``load_subsystem_config``)."""
    if isinstance(config, (str, bytes)):
        try:
            config = json.loads(config)
        except ValueError as e:
            raise ConfigError(f"configuration is not valid JSON: {e}") from e
    if not isinstance(config, dict):
        raise ConfigError("a subsystem configuration is an object with 'subsystem' and 'config'")
    entries = _entries(config.get("config"), f"subsystem '{config.get('subsystem')}'")
    callable_now = _current(client, False)
    for elem in entries:
        if elem["method"] in callable_now:
            client.call(elem["method"], elem.get("params"))


def _current(client: Any, include_aliases: bool) -> List[str]:
    return client.call("rpc_get_methods", {"current": True, "include_aliases": include_aliases})


__all__ = [
    "ConfigError",
    "save_config",
    "save_subsystem_config",
    "load_config",
    "load_subsystem_config",
    "dumps",
]
