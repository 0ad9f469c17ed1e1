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

rtgt extensions: ``nvmf_subsystem_pause`` / ``nvmf_subsystem_resume``, ``--opt KEY=VALUE``
on ``nvmf_create_transport`` for transport-specific options (e.g. SRP's), and ``call METHOD
[PARAMS_JSON]`` for any method with raw parameters.
"""

import argparse
import json
import shlex
import sys
from typing import Any, Callable, Dict, List, Optional

from . import __version__
from .client import DEFAULT_PORT, DEFAULT_SOCKET, DEFAULT_TIMEOUT, Client, DryRunClient, RtgtError
from .config import ConfigError, dumps, load_config, load_subsystem_config, save_config

DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"

PRINT_NONE = "none"
PRINT_DICT = "dict"  # json.dumps(indent=2)
PRINT_JSON = "json"  # the same, with a string's quotes stripped (a created name)

_LEVELS = ["ERROR", "WARNING", "NOTICE", "INFO", "DEBUG"]
_SIGNALS = ["SIGINT", "SIGTERM", "SIGQUIT", "SIGHUP", "SIGKILL", "SIGUSR1"]
_PASSTHRU = [
    "identify_ctrlr",
    "identify_uuid_list",
    "get_log_page",
    "get_set_features",
    "sanitize",
    "security_send_recv",
    "fw_update",
    "nvme_mi",
    "vendor_specific",
]
_ONCS = ["nvmcmps", "nvmdsmsv", "nvmwzsv", "reservs", "nvmcpys"]
_FUSES = ["fcws"]

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


def _opts(args: argparse.Namespace, *names: str, **rename: str) -> Dict[str, Any]:
    """The named attributes of ``args`` that are not ``None`` (rpc.py's ``remove_null``);
    ``rename`` maps an attribute to a different parameter name."""
    out = {}
    for n in names:
        v = getattr(args, n)
        if v is not None:
            out[n] = v
    for attr, param in rename.items():
        v = getattr(args, attr)
        if v is not None:
            out[param] = v
    return out


def _all_opts(args: argparse.Namespace) -> Dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k not in _GLOBALS and v is not None}


def _nqn(nqn: str) -> str:
    return DISCOVERY_NQN if nqn == "discovery" else nqn


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


# ----- builders for the commands that reshape their arguments -----


def _malloc_create(a: argparse.Namespace) -> Dict[str, Any]:
    if a.total_size <= 0:
        raise UsageError("total_size must be > 0")
    if a.block_size <= 0:
        raise UsageError("block_size must be > 0")
    p = {"num_blocks": int((a.total_size * 1024 * 1024) // a.block_size), "block_size": a.block_size}
    p.update(_opts(a, "name", "uuid", "physical_block_size", "optimal_io_boundary", "md_size"))
    p["md_interleave"] = a.md_interleave
    p.update(_opts(a, "dif_type"))
    p["dif_is_head_of_md"] = a.dif_is_head_of_md
    p.update(_opts(a, "dif_pi_format", "numa_id"))
    return p


def _null_create(a: argparse.Namespace) -> Dict[str, Any]:
    if a.block_size <= 0:
        raise UsageError("block_size must be > 0")
    if a.dif_type and not a.md_size:
        raise UsageError("--md-size must be > 0 when --dif-type is > 0")
    p = {"num_blocks": (a.total_size * 1024 * 1024) // a.block_size, "block_size": a.block_size}
    p["name"] = a.name
    p.update(_opts(a, "uuid", "physical_block_size", "md_size", "dif_type"))
    p["dif_is_head_of_md"] = a.dif_is_head_of_md
    p.update(
        _opts(
            a,
            "dif_pi_format",
            "preferred_write_alignment",
            "preferred_write_granularity",
            "optimal_write_size",
            "preferred_unmap_alignment",
            "preferred_unmap_granularity",
        )
    )
    return p


def _aio_create(a: argparse.Namespace) -> Dict[str, Any]:
    p = {"filename": a.filename, "name": a.name}
    p.update(_opts(a, "block_size"))
    p.update({"readonly": a.readonly, "fallocate": a.fallocate})
    p.update(_opts(a, "uuid"))
    p["nowait"] = a.nowait
    return p


def _delay_create(a: argparse.Namespace) -> Dict[str, Any]:
    # rpc.py's keyword order: base, name, uuid, then the four latencies.
    return _opts(
        a,
        "base_bdev_name",
        "name",
        "uuid",
        "avg_read_latency",
        "p99_read_latency",
        "avg_write_latency",
        "p99_write_latency",
    )


def _create_transport(a: argparse.Namespace) -> Dict[str, Any]:
    extra = dict(a.opt or [])
    p = {k: v for k, v in _all_opts(a).items() if k not in ("opt", "masked_oncs", "masked_fuses")}
    for key, choices, attr in (("masked_oncs", _ONCS, a.masked_oncs), ("masked_fuses", _FUSES, a.masked_fuses)):
        if attr:
            bad = sorted(set(attr) - set(choices) - {"all"})
            if bad:
                raise UsageError(
                    f"invalid {key.split('_')[1]}: {', '.join(bad)} (choose from all, {', '.join(choices)})"
                )
            p[key] = list(choices) if "all" in attr else attr
    p.update(extra)
    return p


def _create_subsystem(a: argparse.Namespace) -> Dict[str, Any]:
    p = {"nqn": a.nqn}
    p.update(_opts(a, "tgt_name", "serial_number", "model_number"))
    p["allow_any_host"] = a.allow_any_host
    p.update(_opts(a, "max_namespaces"))
    p["ana_reporting"] = a.ana_reporting
    p.update(_opts(a, "min_cntlid", "max_cntlid", "dmrsl", "wzsl"))
    p["passthrough"] = a.passthrough
    p["enable_nssr"] = a.enable_nssr
    p.update(_opts(a, "admin_label"))
    return p


def _listen_address(a: argparse.Namespace) -> Dict[str, Any]:
    return _opts(a, "trtype", "traddr", "trsvcid", "adrfam")


def _add_listener(a: argparse.Namespace) -> Dict[str, Any]:
    p = {"nqn": _nqn(a.nqn)}
    p.update(_opts(a, "tgt_name"))
    p["secure_channel"] = a.secure_channel
    p.update(_opts(a, "ana_state", "sock_impl", "numa_id"))
    p["listen_address"] = _listen_address(a)
    return p


def _remove_listener(a: argparse.Namespace) -> Dict[str, Any]:
    p = {"nqn": _nqn(a.nqn)}
    p.update(_opts(a, "tgt_name"))
    p["listen_address"] = _listen_address(a)
    return p


def _add_ns(a: argparse.Namespace) -> Dict[str, Any]:
    ns = {"bdev_name": a.bdev_name}
    ns.update(_opts(a, "ptpl_file", "nsid", "nguid", "eui64", "uuid", "anagrpid"))
    ns["no_auto_visible"] = a.no_auto_visible
    p = {"nqn": a.nqn}
    p.update(_opts(a, "tgt_name"))
    p["namespace"] = ns
    return p


def _iostat(a: argparse.Namespace) -> Dict[str, Any]:
    p = _opts(a, "name", "reset_mode", "names")
    if a.per_channel:
        p["per_channel"] = True
    return p


def _set_config(a: argparse.Namespace) -> Dict[str, Any]:
    p: Dict[str, Any] = {}
    if a.admin_cmd_passthru:
        bad = sorted(set(a.admin_cmd_passthru) - set(_PASSTHRU) - {"all"})
        if bad:
            raise UsageError(f"invalid passthru-admin-cmds: {', '.join(bad)}")
        cmds = _PASSTHRU if "all" in a.admin_cmd_passthru else a.admin_cmd_passthru
        p["admin_cmd_passthru"] = {c: True for c in cmds}
    p.update(
        _opts(
            a,
            "poll_groups_mask",
            "discovery_filter",
            "discovery_filters",
            "dhchap_digests",
            "dhchap_dhgroups",
            "dup_host_policy",
        )
    )
    return p


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


def _run_save_config(a: argparse.Namespace, client: Any) -> None:
    if isinstance(client, DryRunClient):
        client.call("framework_get_subsystems")
        return
    subs = _csv(a.subsystems) if a.subsystems else None
    sys.stdout.write(dumps(save_config(client, subs, a.with_batches), a.indent))


def _run_save_subsystem_config(a: argparse.Namespace, client: Any) -> None:
    result = client.call("framework_get_config", {"name": a.name, "with_batches": a.with_batches})
    if isinstance(client, DryRunClient):
        return
    sys.stdout.write(dumps({"subsystem": a.name, "config": result}, a.indent))


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


def _tgt(p: argparse.ArgumentParser, flag: str = "-t") -> None:
    p.add_argument(flag, "--tgt-name", help="Parent NVMe-oF target name")


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

    # ----- framework, app, log -----
    p = c.add(
        "rpc_get_methods",
        "Get list of supported RPC methods",
        lambda a: {"current": a.current, "include_aliases": a.include_aliases},
        PRINT_DICT,
    )
    p.add_argument("-c", "--current", action="store_true", help="only methods callable now")
    p.add_argument("-i", "--include-aliases", action="store_true", help="include aliases")
    c.add("spdk_get_version", "Get the version", printer=PRINT_JSON)
    c.add("framework_start_init", "Start initialization of subsystems")
    c.add("framework_wait_init", "Block until subsystems have been initialized")
    c.add("framework_get_subsystems", "Subsystems in initialization order", printer=PRINT_DICT)
    p = c.add(
        "framework_get_config",
        "Print subsystem configuration",
        lambda a: {"name": a.name, "with_batches": a.with_batches},
        PRINT_DICT,
    )
    p.add_argument("name", help="Name of the subsystem to query")
    p.add_argument("--with-batches", action=argparse.BooleanOptionalAction, default=False)
    c.add("framework_get_reactors", "Display list of all reactors", printer=PRINT_DICT)
    p = c.add(
        "spdk_kill_instance", "Send signal to instance", lambda a: {"sig_name": a.sig_name}
    )
    p.add_argument("sig_name", choices=_SIGNALS, help="Signal to send")
    for name, what in (("log_set_level", "log level"), ("log_set_print_level", "log print level")):
        p = c.add(name, f"Set {what}", lambda a: {"level": a.level})
        p.add_argument("level", choices=_LEVELS, help=what)
    c.add("log_get_level", "Get log level", printer=PRINT_DICT)
    c.add("log_get_print_level", "Get log print level", printer=PRINT_DICT)
    for name, what in (("log_set_flag", "set"), ("log_clear_flag", "clear")):
        p = c.add(name, f"{what} log flag", lambda a: {"flag": a.flag})
        p.add_argument("flag", help='Log flag name or "all"')
    c.add("log_get_flags", "Get log flags", printer=PRINT_DICT)

    p = c.add("save_config", "Write the current configuration to stdout", run=_run_save_config)
    p.add_argument("-i", "--indent", type=int, default=2, help="indent (< 0: compact)")
    p.add_argument("-s", "--subsystems", help="comma-separated subsystems (with dependencies)")
    p.add_argument("--with-batches", action=argparse.BooleanOptionalAction, default=False)
    p = c.add("load_config", "Configure the target from a saved configuration", run=_run_load_config)
    p.add_argument("-i", "--include-aliases", action="store_true", help="include RPC aliases")
    p.add_argument("-j", "--json-conf", help="configuration file (default stdin)")
    p = c.add(
        "save_subsystem_config",
        "Write one subsystem's configuration to stdout",
        run=_run_save_subsystem_config,
    )
    p.add_argument("-i", "--indent", type=int, default=2, help="indent (< 0: compact)")
    p.add_argument("-n", "--name", required=True, help="Name of subsystem")
    p.add_argument("--with-batches", action=argparse.BooleanOptionalAction, default=False)
    p = c.add(
        "load_subsystem_config",
        "Configure one subsystem (single pass)",
        run=_run_load_subsystem_config,
    )
    p.add_argument("-j", "--json-conf", help="configuration file (default stdin)")

    # ----- bdev -----
    p = c.add("bdev_malloc_create", "Create a bdev with malloc backend", _malloc_create, PRINT_JSON)
    p.add_argument("-b", "--name", help="Name of the bdev")
    p.add_argument("-u", "--uuid", help="UUID of the bdev")
    p.add_argument("total_size", type=float, help="Size of malloc bdev in MiB (float > 0)")
    p.add_argument("block_size", type=int, help="Data block size for this bdev")
    p.add_argument("-p", "--physical-block-size", type=int, help="Physical block size")
    p.add_argument("-o", "--optimal-io-boundary", type=int, help="Split boundary, in blocks")
    p.add_argument("-m", "--md-size", type=int, help="Metadata size (0, 8, 16, 32, 64, 128)")
    p.add_argument("-i", "--md-interleave", action="store_true", help="Interleaved metadata")
    p.add_argument("-t", "--dif-type", type=int, choices=[0, 1, 2, 3], help="PI type")
    p.add_argument("-d", "--dif-is-head-of-md", action="store_true", help="PI first in md")
    p.add_argument("-f", "--dif-pi-format", type=int, choices=[0, 1, 2], help="PI format")
    p.add_argument("-n", "--numa-id", type=int, help="NUMA node (-1: any)")
    p = c.add("bdev_malloc_delete", "Delete a malloc disk", lambda a: {"name": a.name})
    p.add_argument("name", help="malloc bdev name")

    p = c.add("bdev_null_create", "Add a bdev with null backend", _null_create, PRINT_JSON)
    p.add_argument("name", help="Block device name")
    p.add_argument("-u", "--uuid", help="UUID of the bdev")
    p.add_argument("total_size", type=int, help="Size of null bdev in MiB (int > 0)")
    p.add_argument("block_size", type=int, help="Data block size for this bdev")
    p.add_argument("-p", "--physical-block-size", type=int, help="Physical block size")
    p.add_argument("-m", "--md-size", type=int, help="Metadata size")
    p.add_argument("-t", "--dif-type", type=int, choices=[0, 1, 2, 3], help="PI type")
    p.add_argument("-d", "--dif-is-head-of-md", action="store_true", help="PI first in md")
    p.add_argument("-f", "--dif-pi-format", type=int, choices=[0, 1, 2], help="PI format")
    p.add_argument("-a", "--preferred-write-alignment", type=int, help="in blocks")
    p.add_argument("-g", "--preferred-write-granularity", type=int, help="in blocks")
    p.add_argument("-s", "--optimal-write-size", type=int, help="in blocks")
    p.add_argument("-c", "--preferred-unmap-alignment", type=int, help="in blocks")
    p.add_argument("-r", "--preferred-unmap-granularity", type=int, help="in blocks")
    p = c.add("bdev_null_delete", "Delete a null bdev", lambda a: {"name": a.name})
    p.add_argument("name", help="null bdev name")

    p = c.add("bdev_aio_create", "Add a bdev with aio backend", _aio_create, PRINT_JSON)
    p.add_argument("filename", help="Path to device or file")
    p.add_argument("name", help="Block device name")
    p.add_argument("block_size", type=int, nargs="?", help="Block size for this bdev")
    p.add_argument("-r", "--readonly", action="store_true", help="read-only bdev")
    p.add_argument("--fallocate", action="store_true", help="unmap/write zeroes by fallocate")
    p.add_argument("-u", "--uuid", help="UUID of the bdev")
    p.add_argument("--no-wait", dest="nowait", action="store_true", help="RWF_NOWAIT")
    p = c.add("bdev_aio_delete", "Delete an aio disk", lambda a: {"name": a.name})
    p.add_argument("name", help="aio bdev name")

    p = c.add("bdev_delay_create", "Add a delay bdev on existing bdev", _delay_create, PRINT_JSON)
    p.add_argument("-b", "--base-bdev-name", required=True, help="Name of the existing bdev")
    p.add_argument("-d", "--name", required=True, help="Name of the delay bdev")
    p.add_argument("-u", "--uuid", help="UUID of the bdev")
    p.add_argument("-r", "--avg-read-latency", type=int, required=True, help="Average read latency (us)")
    p.add_argument(
        "-t", "--nine-nine-read-latency", dest="p99_read_latency", type=int, required=True,
        help="Latency of 1 read in 100 (us)",
    )
    p.add_argument("-w", "--avg-write-latency", type=int, required=True, help="Average write latency (us)")
    p.add_argument(
        "-n", "--nine-nine-write-latency", dest="p99_write_latency", type=int, required=True,
        help="Latency of 1 write in 100 (us)",
    )
    p = c.add("bdev_delay_delete", "Delete a delay bdev", lambda a: {"name": a.name})
    p.add_argument("name", help="delay bdev name")
    p = c.add(
        "bdev_delay_update_latency",
        "Update one of the latency values for a given delay bdev",
        lambda a: _opts(a, "delay_bdev_name", "latency_type", "latency_us"),
        PRINT_JSON,
    )
    p.add_argument("delay_bdev_name", help="The name of the given delay bdev")
    p.add_argument(
        "latency_type", choices=["avg_read", "avg_write", "p99_read", "p99_write"], help="Latency bucket to update"
    )
    p.add_argument("latency_us", type=int, help="new latency value in microseconds")

    p = c.add(
        "bdev_get_bdevs",
        "Display current blockdev list or required blockdev",
        lambda a: _opts(a, "name", timeout_ms="timeout"),
        PRINT_DICT,
    )
    p.add_argument("-b", "--name", help="Name of the blockdev")
    p.add_argument("-t", "--timeout-ms", type=int, help="ms to wait for the bdev to appear")
    p = c.add(
        "bdev_get_iostat",
        "Display I/O statistics of the blockdevs",
        _iostat,
        PRINT_DICT,
    )
    p.add_argument("-b", "--name", help="Name of the blockdev")
    p.add_argument("-c", "--per-channel", action="store_true", help="per channel statistics")
    p.add_argument("--reset-mode", choices=["all", "maxmin", "error", "none"])
    p.add_argument("--names", type=_csv, help="comma-separated bdev names")
    c.add("bdev_wait_for_examine", "Report when all bdevs have been examined")

    # ----- nvmf: target -----
    p = c.add("nvmf_set_config", "Set NVMf target config", _set_config)
    p.add_argument(
        "-p", "--passthru-admin-cmds", dest="admin_cmd_passthru", type=_csv, default=[],
        help="comma-separated admin commands to pass through (or all)",
    )
    p.add_argument("-m", "--poll-groups-mask", help="CPU mask for poll groups")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-d", "--discovery-filter", help="deprecated, use --discovery-filters")
    g.add_argument("--discovery-filters", type=_csv, help="comma-separated discovery filters")
    p.add_argument("--dhchap-digests", type=_csv, help="comma-separated digests")
    p.add_argument("--dhchap-dhgroups", type=_csv, help="comma-separated DH groups")
    p.add_argument("--dup-host-policy", choices=["allow", "restrict_per_listener"])
    p = c.add(
        "nvmf_set_max_subsystems",
        "Set the maximum number of NVMf target subsystems",
        lambda a: {"max_subsystems": a.max_subsystems},
    )
    p.add_argument("-x", "--max-subsystems", type=int, required=True)
    p = c.add(
        "nvmf_set_crdt", "Set the Command Retry Delay Times", lambda a: _opts(a, "crdt1", "crdt2", "crdt3")
    )
    p.add_argument("-t1", "--crdt1", type=int, help="CRDT1, units of 100 ms")
    p.add_argument("-t2", "--crdt2", type=int, help="CRDT2, units of 100 ms")
    p.add_argument("-t3", "--crdt3", type=int, help="CRDT3, units of 100 ms")
    p = c.add(
        "nvmf_get_stats", "Display current statistics", lambda a: _opts(a, "tgt_name"), PRINT_DICT
    )
    _tgt(p)

    # ----- nvmf: transports -----
    p = c.add("nvmf_create_transport", "Create NVMf transport", _create_transport)
    p.add_argument("-t", "--trtype", required=True, help="Transport type (RDMA, SRP)")
    p.add_argument("-g", "--tgt-name", help="Parent NVMe-oF target name")
    p.add_argument("-q", "--max-queue-depth", type=int, help="Max outstanding I/O per queue")
    p.add_argument("-m", "--max-io-qpairs-per-ctrlr", type=int, help="Max I/O qpairs per controller")
    p.add_argument("-c", "--in-capsule-data-size", type=int, help="In-capsule data size")
    p.add_argument("-i", "--max-io-size", type=int, help="Max I/O size (bytes)")
    p.add_argument("-u", "--io-unit-size", type=int, help="I/O unit size (bytes; deprecated)")
    p.add_argument("-a", "--max-aq-depth", type=int, help="Max admin commands per AQ")
    p.add_argument("-n", "--num-shared-buffers", type=int, help="Shared buffers (deprecated)")
    p.add_argument("-b", "--buf-cache-size", type=int, help="Buffers cached per poll group (deprecated)")
    p.add_argument("--iobuf-small-cache-size", type=int, help="Small iobufs per poll group")
    p.add_argument("--iobuf-large-cache-size", type=int, help="Large iobufs per poll group")
    p.add_argument("-z", "--zcopy", action="store_true", default=None, help="Zero-copy")
    p.add_argument("-d", "--num-cqe", type=int, help="CQ entries when no_srq (RDMA)")
    p.add_argument("-s", "--max-srq-depth", type=int, help="Per-thread SRQ depth (RDMA)")
    p.add_argument("-r", "--no-srq", action="store_true", default=None, help="Disable SRQ (RDMA)")
    p.add_argument(
        "-o", "--c2h-success", action="store_false", default=None, help="Disable C2H success (TCP)"
    )
    p.add_argument(
        "-f", "--dif-insert-or-strip", action="store_true", default=None, help="DIF insert/strip"
    )
    p.add_argument("-y", "--sock-priority", type=int, help="Socket priority (TCP)")
    p.add_argument("-l", "--acceptor-backlog", type=int, help="Listen backlog (RDMA)")
    p.add_argument("-x", "--abort-timeout-sec", type=int, help="Abort execution timeout (s)")
    p.add_argument(
        "-w", "--no-wr-batching", action="store_true", default=None, help="No WR batching (RDMA)"
    )
    p.add_argument("-e", "--control-msg-num", type=int, help="Control messages (TCP)")
    p.add_argument("-M", "--disable-mappable-bar0", action="store_true", default=None)
    p.add_argument("-I", "--disable-adaptive-irq", action="store_true", default=None)
    p.add_argument("-S", "--disable-shadow-doorbells", action="store_true", default=None)
    p.add_argument("--acceptor-poll-rate", type=int, help="Acceptor poll period (us)")
    p.add_argument("--ack-timeout", type=int, help="ACK timeout (ms)")
    p.add_argument("--data-wr-pool-size", type=int, help="Data WR pool size (RDMA)")
    p.add_argument("--disable-command-passthru", action="store_true", default=None)
    p.add_argument("--kas", type=int, help="Keep-alive granularity, units of 100 ms")
    p.add_argument("--min-kato", type=int, help="Minimum keep-alive timeout (ms)")
    p.add_argument("--masked-oncs", type=_csv, help="ONCS features to hide (or all)")
    p.add_argument("--masked-fuses", type=_csv, help="FUSES features to hide (or all)")
    p.add_argument(
        "--opt",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="transport-specific option (VALUE parsed as JSON, else a string); repeatable",
    )
    p = c.add(
        "nvmf_get_transports",
        "Display nvmf transports or required transport",
        lambda a: _opts(a, "trtype", "tgt_name"),
        PRINT_DICT,
    )
    p.add_argument("--trtype", help="Transport type")
    _tgt(p)

    # ----- nvmf: subsystems -----
    p = c.add(
        "nvmf_get_subsystems",
        "Display nvmf subsystems or required subsystem",
        lambda a: _opts(a, "nqn", "tgt_name"),
        PRINT_DICT,
    )
    p.add_argument("nqn", nargs="?", help="Subsystem NQN")
    _tgt(p)
    p = c.add("nvmf_create_subsystem", "Create an NVMe-oF subsystem", _create_subsystem)
    p.add_argument("nqn", help="Subsystem NQN")
    _tgt(p)
    p.add_argument("-s", "--serial-number", help="Serial number of the virtual controller")
    p.add_argument("-d", "--model-number", help="Model number of the virtual controller")
    p.add_argument("-a", "--allow-any-host", action="store_true", help="Allow any host")
    p.add_argument("-m", "--max-namespaces", type=int, help="Maximum number of namespaces")
    p.add_argument("-r", "--ana-reporting", action="store_true", help="Enable ANA reporting")
    p.add_argument("-i", "--min-cntlid", type=int, help="Minimum controller ID")
    p.add_argument("-I", "--max-cntlid", type=int, help="Maximum controller ID")
    p.add_argument("--dmrsl", type=int, help="DSM range size limit (blocks)")
    p.add_argument("--wzsl", type=int, help="Write zeroes size limit (2^n x MPSMIN)")
    p.add_argument("-p", "--passthrough", action="store_true", help="Passthrough subsystem")
    p.add_argument("-n", "--enable-nssr", action="store_true", help="Enable NSSR")
    p.add_argument("--admin-label", help="Admin label (4-256 ASCII characters)")
    p = c.add(
        "nvmf_delete_subsystem", "Delete a nvmf subsystem", lambda a: _opts(a, "nqn", "tgt_name")
    )
    p.add_argument("nqn", help="Subsystem NQN")
    _tgt(p)

    # rtgt extensions
    p = c.add(
        "nvmf_subsystem_pause",
        "Pause a subsystem (or one namespace) on every poll group (rtgt)",
        lambda a: _opts(a, "nqn", "nsid", "tgt_name"),
    )
    p.add_argument("nqn", help="Subsystem NQN")
    p.add_argument("-n", "--nsid", type=int, help="Namespace to pause (default: whole subsystem)")
    _tgt(p)
    p = c.add(
        "nvmf_subsystem_resume",
        "Resume a paused subsystem (rtgt)",
        lambda a: _opts(a, "nqn", "tgt_name"),
    )
    p.add_argument("nqn", help="Subsystem NQN")
    _tgt(p)

    # ----- nvmf: listeners -----
    for name, help_, build in (
        ("nvmf_subsystem_add_listener", "Add a listener to an NVMe-oF subsystem", _add_listener),
        ("nvmf_subsystem_remove_listener", "Remove a listener from an NVMe-oF subsystem", _remove_listener),
    ):
        p = c.add(name, help_, build)
        p.add_argument("nqn", help="Subsystem NQN ('discovery' for the discovery NQN)")
        p.add_argument("-t", "--trtype", required=True, help="Transport type, e.g. rdma")
        p.add_argument("-a", "--traddr", required=True, help="Transport address, e.g. an IP")
        p.add_argument("-p", "--tgt-name", help="Parent NVMe-oF target name")
        p.add_argument("-f", "--adrfam", help="Address family: ipv4, ipv6, ib, fc")
        p.add_argument("-s", "--trsvcid", help="Service id, e.g. a port number")
        if name == "nvmf_subsystem_add_listener":
            p.add_argument("-k", "--secure-channel", action="store_true", help="Secure channel")
            p.add_argument(
                "-n", "--ana-state", choices=["optimized", "non_optimized", "inaccessible"]
            )
            p.add_argument("-S", "--sock-impl", help="Socket implementation")
            p.add_argument("--numa-id", type=int, help="NUMA node (VFIOUSER)")

    # ----- nvmf: namespaces -----
    p = c.add("nvmf_subsystem_add_ns", "Add a namespace to an NVMe-oF subsystem", _add_ns, PRINT_JSON)
    p.add_argument("nqn", help="Subsystem NQN")
    p.add_argument("bdev_name", help="Name of the bdev to expose as a namespace")
    _tgt(p)
    p.add_argument("-p", "--ptpl-file", help="Persistent reservation file")
    p.add_argument("-n", "--nsid", type=int, help="Namespace ID")
    p.add_argument("-g", "--nguid", help="16-byte NGUID in hex")
    p.add_argument("-e", "--eui64", help="8-byte EUI-64 in hex")
    p.add_argument("-u", "--uuid", help="RFC 4122 UUID")
    p.add_argument("-a", "--anagrpid", type=int, help="ANA group ID")
    p.add_argument("-i", "--no-auto-visible", action="store_true", help="Not visible by default")
    p = c.add(
        "nvmf_subsystem_remove_ns",
        "Remove a namespace from an NVMe-oF subsystem",
        lambda a: _opts(a, "nqn", "nsid", "tgt_name"),
    )
    p.add_argument("nqn", help="Subsystem NQN")
    p.add_argument("nsid", type=int, help="Namespace ID")
    _tgt(p)

    # ----- nvmf: hosts -----
    p = c.add(
        "nvmf_subsystem_add_host",
        "Add a host to an NVMe-oF subsystem",
        lambda a: _opts(a, "nqn", "host", "tgt_name", "psk", "dhchap_key", "dhchap_ctrlr_key"),
    )
    p.add_argument("nqn", help="Subsystem NQN")
    p.add_argument("host", help="Host NQN to allow")
    _tgt(p)
    p.add_argument("--psk", help="TLS pre-shared key name (TCP)")
    p.add_argument("--dhchap-key", help="DH-HMAC-CHAP key name")
    p.add_argument("--dhchap-ctrlr-key", help="DH-HMAC-CHAP controller key name")
    p = c.add(
        "nvmf_subsystem_remove_host",
        "Remove a host from an NVMe-oF subsystem",
        lambda a: _opts(a, "nqn", "host", "tgt_name", "timeout_ms"),
    )
    p.add_argument("nqn", help="Subsystem NQN")
    p.add_argument("host", help="Host NQN to remove")
    _tgt(p)
    p.add_argument("-T", "--timeout-ms", type=int, help="ms to wait for I/O to complete")
    p = c.add(
        "nvmf_subsystem_allow_any_host",
        "Allow any host to connect to the subsystem",
        lambda a: _opts(a, "nqn", "allow_any_host", "tgt_name"),
    )
    p.add_argument("nqn", help="Subsystem NQN")
    p.add_argument(
        "--allow-any-host", action=argparse.BooleanOptionalAction, required=True,
        help="allow any host (--allow-any-host) or only the allowed list (--no-allow-any-host)",
    )
    _tgt(p)

    # ----- nvmf: introspection -----
    for name, help_ in (
        ("nvmf_subsystem_get_controllers", "Display controllers of an NVMe-oF subsystem"),
        ("nvmf_subsystem_get_qpairs", "Display queue pairs of an NVMe-oF subsystem"),
        ("nvmf_subsystem_get_listeners", "Display listeners of an NVMe-oF subsystem"),
    ):
        p = c.add(name, help_, lambda a: _opts(a, "nqn", "tgt_name"), PRINT_DICT)
        p.add_argument("nqn", help="Subsystem NQN")
        _tgt(p)

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

