"""``rtgt-rpc``: SPDK ``rpc.py``'s command line for the methods rtgt implements.

Global options and each command's positional arguments and short/long options are
rpc.py's, so scripts written for rpc.py run unchanged::

    rtgt-rpc -s /var/tmp/spdk.sock nvmf_create_transport -t RDMA -u 8192 -i 131072 -c 8192
    rtgt-rpc bdev_malloc_create 64 512 -b Malloc0
    rtgt-rpc nvmf_create_subsystem nqn.2016-06.io.spdk:cnode1 -a -s SPDK00000000000001 -d SPDK_Controller1
    rtgt-rpc nvmf_subsystem_add_listener nqn.2016-06.io.spdk:cnode1 -t rdma -a 10.0.0.1 -s 4420
    rtgt-rpc save_config > saved.json; rtgt-rpc load_config -j saved.json

Results are printed as rpc.py prints them (JSON, indent 2; a created name bare; nothing for
calls that only answer ``true``). On failure the exit status is 1 and stderr has one line
naming the method, the server's message and code. With no command, commands are read from
stdin one per line (``#`` starts a comment) and run over one connection.

Every command, its positional arguments, options, value conversions and the request it sends
come from ``methods.json``, which is generated from the target's own method specs (the Rust
crate ``rpc-spec``; a Rust test fails when the committed file is stale), so this command line,
``rtgt rpc`` and the server cannot disagree on a method's parameters.

rtgt extensions: ``nvmf_subsystem_pause`` / ``nvmf_subsystem_resume``, ``--opt KEY=VALUE``
on ``nvmf_create_transport`` for any transport-specific option, and ``call METHOD
[PARAMS_JSON]`` for any method with raw parameters.
"""

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from . import __version__
from .client import DEFAULT_PORT, DEFAULT_SOCKET, DEFAULT_TIMEOUT, Client, DryRunClient, RtgtError
from .config import ConfigError, dumps, load_config, load_subsystem_config, save_config

DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"

PRINT_NONE = "none"
PRINT_DICT = "dict"  # json.dumps(indent=2)
PRINT_JSON = "json"  # the same, with a string's quotes stripped (a created name)

METHODS_JSON = Path(__file__).with_name("methods.json")

_GLOBALS = {
    "server_addr",
    "port",
    "timeout",
    "conn_retries",
    "dry_run",
    "command",
    "build",
    "run",
    "printer",
    "method",
}


class UsageError(Exception):
    """A command's arguments are inconsistent (reported like an argparse error, exit 1)."""


def _csv(text: str) -> List[str]:
    return [t for t in text.split(",") if t]


def _int_csv(text: str) -> List[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _key_value(text: str) -> Any:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return (key.replace("-", "_"), _json_value(value))


class _Commands:
    def __init__(self, sub: Any) -> None:
        self.sub = sub

    def add(
        self,
        name: str,
        help: str,
        build: Optional[Callable[[argparse.Namespace], Any]] = None,
        printer: str = PRINT_NONE,
        run: Optional[Callable[[argparse.Namespace, Any], None]] = None,
        method: Optional[str] = None,
    ) -> argparse.ArgumentParser:
        p = self.sub.add_parser(name, help=help, description=help)
        p.set_defaults(
            build=build or (lambda a: None),
            printer=printer,
            run=run,
            method=method or name,
        )
        return p


# ----- commands built from the method specs (methods.json) -----


def load_specs() -> List[Dict[str, Any]]:
    """Every method's spec, as generated from the target's Rust method specs."""
    with open(METHODS_JSON, encoding="utf-8") as f:
        return json.load(f)["methods"]


def _dest(arg: Dict[str, Any]) -> str:
    # rpc.py's size arguments are total_size (its messages name them so); a key that is also
    # a global option's (bdev_get_bdevs' timeout) gets a name of its own.
    if arg["kind"] == "size_mib":
        return "total_size"
    return arg["key"] + "_arg" if arg["key"] in _GLOBALS else arg["key"]


def _add_arg(p: Any, method: Dict[str, Any], arg: Dict[str, Any]) -> None:
    kind = arg["kind"]
    kw: Dict[str, Any] = {"help": arg["help"]}
    if "pos" in arg:
        names = [_dest(arg)]
        if not arg.get("required"):
            kw["nargs"] = "?"
    else:
        names = [f"--{arg['long']}"]
        if "short" in arg:
            names.insert(0, f"-{arg['short']}")
        names += [a for a, long in method.get("aliases", []) if long == f"--{arg['long']}"]
        kw["dest"] = _dest(arg)
        if arg.get("required"):
            kw["required"] = True
    if kind == "int":
        kw["type"] = int
    elif kind == "choice":
        kw["choices"] = arg["choices"]
    elif kind == "int_in":
        lo, hi = arg["range"]
        kw.update(type=int, choices=range(lo, hi + 1))
    elif kind == "flag":
        kw.update(action="store_true", default=False)
    elif kind == "flag_off":
        kw.update(action="store_false", default=True)
    elif kind == "flag_if_given":
        kw.update(action="store_true", default=None)
    elif kind == "toggle":
        kw.update(action=argparse.BooleanOptionalAction, default=arg["default"])
    elif kind in ("list", "list_of", "flag_set"):
        kw["type"] = _csv
    elif kind == "int_list":
        kw["type"] = _int_csv
    elif kind == "key_value":
        kw.update(action="append", metavar="key=value")
    elif kind == "size_mib":
        kw["type"] = float if arg["float"] else int
    p.add_argument(*names, **kw)


def _names(arg: Dict[str, Any], given: List[str]) -> List[str]:
    """`a,b` or `all` over the argument's choices; unknown names are a usage error."""
    choices = arg["choices"]
    bad = sorted(set(given) - set(choices) - {"all"})
    if bad:
        what = arg["long"] if arg["kind"] == "flag_set" else arg["key"].split("_")[-1]
        raise UsageError(f"invalid {what}: {', '.join(bad)} (choose from all, {', '.join(choices)})")
    return list(choices) if "all" in given else given


def _value(arg: Dict[str, Any], a: argparse.Namespace) -> Any:
    """The JSON value an argument sends (``None``: it sends nothing), as rpc.py builds it."""
    kind = arg["kind"]
    v = getattr(a, _dest(arg))
    if v is None:
        return None
    if kind == "size_mib":
        block_size = getattr(a, arg["block_size"])
        if v <= 0:
            raise UsageError("total_size must be > 0")
        if block_size is None or block_size <= 0:
            raise UsageError(f"{arg['block_size']} must be > 0")
        blocks = (v * 1024 * 1024) // block_size
        return int(blocks)
    if kind == "list_of":
        return _names(arg, v)
    if kind == "flag_set":
        return {c: True for c in _names(arg, v)} if v else None
    if kind == "key_value":
        out = {}
        for entry in v:
            key, sep, value = entry.partition("=")
            if not sep:
                raise UsageError(f"--{arg['long']} {entry} not in key=value form")
            out[key] = value
        return out
    return v


def build_params(method: Dict[str, Any], a: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """The request's parameters: the arguments in the spec's key order, a group (rpc.py's
    ``group_as``) last; ``None`` when there are none (the request has no ``params``)."""
    check = _CHECKS.get(method["name"])
    if check:
        check(a)
    group = method.get("group")
    out: Dict[str, Any] = {}
    grouped: Dict[str, Any] = {}
    for arg in method["args"]:
        if arg.get("json_only"):
            continue
        v = _value(arg, a)
        if v is None:
            continue
        if method.get("discovery_alias") and arg["key"] == "nqn" and v == "discovery":
            v = DISCOVERY_NQN
        if group and arg["key"] in group["keys"]:
            grouped[arg["key"]] = v
        else:
            out[arg["key"]] = v
    if grouped:
        out[group["name"]] = grouped
    for key, value in getattr(a, "opt", None) or []:
        out[key] = value
    return out or None


def _null_create_check(a: argparse.Namespace) -> None:
    if a.dif_type and not a.md_size:
        raise UsageError("--md-size must be > 0 when --dif-type is > 0")


# Client-side checks rpc.py makes before sending (the server checks again).
_CHECKS: Dict[str, Callable[[argparse.Namespace], None]] = {
    "bdev_null_create": _null_create_check,
}


def _raw_call(a: argparse.Namespace) -> Any:
    if a.params is None:
        return None
    try:
        params = json.loads(a.params)
    except ValueError as e:
        raise UsageError(f"PARAMS is not valid JSON: {e}") from e
    return params


# ----- commands that run more than one call -----


def _read_json_arg(source: Any) -> Any:
    if source is None or source == "-":
        return json.load(sys.stdin)
    try:
        with open(source, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        # rpc.py also accepts the JSON text itself in place of a file name.
        try:
            return json.loads(source)
        except ValueError:
            raise ConfigError(f"{source}: no such file, and not JSON text either") from None
    except ValueError as e:
        raise ConfigError(f"{source}: not valid JSON: {e}") from e


def _indent(a: argparse.Namespace) -> int:
    return 2 if a.indent is None else a.indent


def _run_save_config(a: argparse.Namespace, client: Any) -> None:
    if isinstance(client, DryRunClient):
        client.call("framework_get_subsystems")
        return
    subs = _csv(a.subsystems) if a.subsystems else None
    sys.stdout.write(dumps(save_config(client, subs, a.with_batches), _indent(a)))


def _run_save_subsystem_config(a: argparse.Namespace, client: Any) -> None:
    result = client.call("framework_get_config", {"name": a.name, "with_batches": a.with_batches})
    if isinstance(client, DryRunClient):
        return
    sys.stdout.write(dumps({"subsystem": a.name, "config": result}, _indent(a)))


def _run_load_config(a: argparse.Namespace, client: Any) -> None:
    config = _read_json_arg(a.json_conf)
    if isinstance(client, DryRunClient):
        # Show what would be sent, in file order.
        for sub in config.get("subsystems", []) if isinstance(config, dict) else []:
            for item in sub.get("config") or []:
                for elem in item if isinstance(item, list) else [item]:
                    client.call(elem.get("method"), elem.get("params"))
        return
    skipped = load_config(client, config, a.include_aliases)
    if skipped:
        print("Some configs were skipped because the RPC state that can call them passed over.")


def _run_load_subsystem_config(a: argparse.Namespace, client: Any) -> None:
    config = _read_json_arg(a.json_conf)
    if isinstance(client, DryRunClient):
        for elem in config.get("config") or []:
            client.call(elem.get("method"), elem.get("params"))
        return
    load_subsystem_config(client, config)


def build_parser() -> argparse.ArgumentParser:
    """The ``rtgt-rpc`` argument parser (every command as a subcommand)."""
    parser = argparse.ArgumentParser(
        prog="rtgt-rpc",
        description="rtgt JSON-RPC command line (SPDK rpc.py compatible)",
    )
    parser.add_argument(
        "-s",
        dest="server_addr",
        default=DEFAULT_SOCKET,
        help=f"RPC Unix socket path or IP address (default {DEFAULT_SOCKET})",
    )
    parser.add_argument(
        "-p",
        dest="port",
        type=int,
        default=DEFAULT_PORT,
        help=f"RPC port when -s is an IP address (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "-t",
        dest="timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for a response (default {DEFAULT_TIMEOUT})",
    )
    parser.add_argument(
        "-r",
        dest="conn_retries",
        type=int,
        default=0,
        help="retry connecting N times, 0.2 s apart (default 0)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the requests instead of sending them"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    c = _Commands(sub)

    _RUNS = {
        "save_config": _run_save_config,
        "load_config": _run_load_config,
        "save_subsystem_config": _run_save_subsystem_config,
        "load_subsystem_config": _run_load_subsystem_config,
    }
    printers = {"none": PRINT_NONE, "json": PRINT_JSON, "dict": PRINT_DICT}
    for method in load_specs():
        run = _RUNS.get(method["action"])
        p = c.add(
            method["name"],
            method["help"],
            (lambda a, m=method: build_params(m, a)) if run is None else None,
            printers[method["prints"]],
            run,
        )
        exclusive: Dict[str, Any] = {}
        # argparse takes positionals in the order they are added: by position; the request's
        # key order stays the spec's (build_params).
        args = [a for a in method["args"] if not a.get("json_only")]
        args.sort(key=lambda a: a.get("pos", len(args)))
        for arg in args:
            other = arg.get("conflicts") or next(
                (x["key"] for x in method["args"] if x.get("conflicts") == arg["key"]), None
            )
            target = p
            if other is not None:
                pair = tuple(sorted((arg["key"], other)))
                target = exclusive.setdefault(pair, p.add_mutually_exclusive_group())
            _add_arg(target, method, arg)
        if method["name"] == "nvmf_create_transport":
            p.add_argument(
                "--opt",
                action="append",
                type=_key_value,
                metavar="KEY=VALUE",
                help="any transport-specific option (VALUE parsed as JSON, else a string); repeatable",
            )

    # ----- any method -----
    p = c.add("call", "Call any method with raw JSON parameters (rtgt)", _raw_call, PRINT_DICT)
    p.add_argument("rpc_method", metavar="METHOD", help="method name")
    p.add_argument("params", nargs="?", metavar="PARAMS_JSON", help="parameters as JSON")
    p.set_defaults(method=None)
    return parser


def _print_result(result: Any, printer: str) -> None:
    if printer == PRINT_NONE:
        return
    text = json.dumps(result, indent=2)
    if printer == PRINT_JSON:
        text = text.strip('"')
    print(text)


def _execute(args: argparse.Namespace, client: Any) -> None:
    if args.run is not None:
        args.run(args, client)
        return
    params = args.build(args)
    method = args.method or args.rpc_method
    result = client.call(method, params)
    if not isinstance(client, DryRunClient):
        _print_result(result, args.printer)


def _error_line(args: Optional[argparse.Namespace], e: Exception) -> str:
    from .client import RpcError

    if isinstance(e, RpcError):
        return f"rtgt-rpc: {e}"
    name = None
    if args is not None and getattr(args, "command", None):
        name = args.rpc_method if args.command == "call" else args.command
    where = f"{name}: " if name else ""
    return f"rtgt-rpc: {where}{e}"


def _make_client(args: argparse.Namespace) -> Any:
    if args.dry_run:
        return DryRunClient(sys.stdout)
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"timeout must be positive, not {args.timeout}")
    if args.conn_retries < 0:
        raise UsageError("-r must not be negative")
    return Client(args.server_addr, args.port, args.timeout, args.conn_retries)


def _run_script(parser: argparse.ArgumentParser, args: argparse.Namespace, stream: Any) -> int:
    client = _make_client(args)
    with client:
        for lineno, line in enumerate(stream, 1):
            words = shlex.split(line, comments=True)
            if not words:
                continue
            try:
                sub = parser.parse_args(words)
            except SystemExit:
                print(f"rtgt-rpc: line {lineno}: cannot parse: {line.strip()}", file=sys.stderr)
                return 1
            if sub.command is None:
                continue
            try:
                _execute(sub, client)
            except (RtgtError, UsageError, OSError) as e:
                print(f"{_error_line(sub, e)} (line {lineno})", file=sys.stderr)
                return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``rtgt-rpc``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            if sys.stdin.isatty():
                parser.print_help()
                return 1
            return _run_script(parser, args, sys.stdin)
        with _make_client(args) as client:
            _execute(args, client)
        return 0
    except (RtgtError, UsageError, OSError) as e:
        print(_error_line(args, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rtgt-rpc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


def run() -> None:
    """Console-script wrapper: exits with :func:`main`'s status."""
    sys.exit(main())

