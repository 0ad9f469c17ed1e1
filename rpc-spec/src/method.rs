//! A method's command line, as rpc.py spells it: its positional arguments and options with
//! rpc.py's short and long names, the JSON key each one fills, and how its value is converted.
//!
//! The order of [`MethodSpec::args`] is the order of the keys in the request, which is the
//! order rpc.py sends them in (its keyword arguments, or argparse's declaration order);
//! positional arguments carry their own position.

use crate::param::{JsonType, Param};
use ValueKind::*;

/// How an argument's text becomes a JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A string.
    Str,
    /// An integer (argparse `type=int`).
    Int,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// An integer in `lo..=hi` (argparse `choices=[...]` of integers).
    IntIn(i64, i64),
    /// argparse `store_true`: no value; the key is always sent, `false` unless given.
    Flag,
    /// argparse `store_false`: no value; the key is always sent, `true` unless given.
    FlagOff,
    /// argparse `store_true` with `default=None`: no value; `true` is sent only when given.
    FlagIfGiven,
    /// argparse `BooleanOptionalAction`: `--x` sends `true`, `--no-x` sends `false`; absent,
    /// the default is sent if there is one, else nothing.
    Toggle(Option<bool>),
    /// A comma-separated list, sent as an array of strings.
    List,
    /// A comma-separated list of unsigned integers, sent as an array of numbers.
    IntList,
    /// A comma-separated list of these names (or `all` for every one), sent as an array.
    ListOf(&'static [&'static str]),
    /// A comma-separated list of these names (or `all`), sent as an object of `true`s.
    FlagSet(&'static [&'static str]),
    /// `key=value`, repeatable (argparse `action='append'`), sent as an object of strings.
    KeyValue,
    /// A size in MiB (`float` allows fractions), sent as the number of blocks of the
    /// argument whose key is `block_size`: `size * 2^20 / block_size`, rounded down.
    SizeMib {
        /// Key of the block size argument.
        block_size: &'static str,
        /// Whether fractions of a MiB are allowed (rpc.py: `float` for malloc, `int` for null).
        float: bool,
    },
}

impl ValueKind {
    /// Whether the argument takes a value on the command line.
    pub fn takes_value(self) -> bool {
        !matches!(self, Flag | FlagOff | FlagIfGiven | Toggle(_))
    }
}

/// Which live or static names complete an argument (in `rtgt shell`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Complete {
    /// Nothing to offer.
    None,
    /// NQNs of existing subsystems (the discovery subsystem included).
    Nqn,
    /// Names of existing bdevs.
    Bdev,
    /// Names of bdevs not claimed by a namespace.
    FreeBdev,
    /// Names of bdevs of one product (`Malloc disk`, `Null disk`, `AIO disk`, `delay`).
    BdevOf(&'static str),
    /// Transport types that exist (`RDMA`, `SRP`).
    Transport,
    /// Transport types rtgt can create.
    TransportKind,
    /// Allowed hosts of the subsystem named by the first positional argument.
    Host,
    /// Namespace ids of the subsystem named by the first positional argument.
    Nsid,
    /// Listener addresses of the subsystem named by the first positional argument.
    Traddr,
    /// Listener service ids (ports) of the subsystem named by the first positional argument.
    Trsvcid,
    /// Keyring key names.
    Key,
    /// The framework's subsystem names (`bdev`, `nvmf`, ...).
    FwSubsystem,
    /// A file name.
    File,
}

/// Where an argument sits on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The n-th positional argument (from 0).
    Pos(usize),
    /// An option with an optional short name and a long name.
    Opt(Option<char>, &'static str),
    /// A parameter the server takes that the command lines do not offer (older clients' keys,
    /// rtgt extensions reached with raw parameters).
    Key,
}

/// One argument of a method.
#[derive(Debug, Clone, Copy)]
pub struct ArgSpec {
    /// The JSON key it fills (argparse's `dest`).
    pub key: &'static str,
    /// Positional or option.
    pub at: At,
    /// How its value is converted.
    pub kind: ValueKind,
    /// Whether it must be given.
    pub required: bool,
    /// One line of help.
    pub help: &'static str,
    /// What completes it in the shell.
    pub complete: Complete,
    /// Key of an argument it cannot be combined with.
    pub conflicts: Option<&'static str>,
    /// The exact JSON type the server takes, where it is narrower than what the value kind
    /// sends (`Uint(32)` for an `Int`).
    pub json: Option<JsonType>,
}

impl ArgSpec {
    /// Marks the argument required.
    pub const fn req(mut self) -> Self {
        self.required = true;
        self
    }

    /// Sets what completes it.
    pub const fn comp(mut self, c: Complete) -> Self {
        self.complete = c;
        self
    }

    /// Makes it exclusive with the argument whose key is `key`.
    pub const fn conflicts(mut self, key: &'static str) -> Self {
        self.conflicts = Some(key);
        self
    }

    /// Narrows the JSON type the server takes.
    pub const fn json(mut self, kind: JsonType) -> Self {
        self.json = Some(kind);
        self
    }

    /// Whether the command lines offer it.
    pub fn on_command_line(&self) -> bool {
        !matches!(self.at, At::Key)
    }

    /// Whether it is positional.
    pub fn is_positional(&self) -> bool {
        matches!(self.at, At::Pos(_))
    }

    /// The long option name, if it is an option.
    pub fn long(&self) -> Option<&'static str> {
        match self.at {
            At::Opt(_, l) => Some(l),
            At::Pos(_) | At::Key => None,
        }
    }

    /// The short option name, if it has one.
    pub fn short(&self) -> Option<char> {
        match self.at {
            At::Opt(s, _) => s,
            At::Pos(_) | At::Key => None,
        }
    }
}

/// A positional argument (required; [`pos_opt`] is an optional one).
pub const fn pos(i: usize, key: &'static str, kind: ValueKind, help: &'static str) -> ArgSpec {
    ArgSpec {
        key,
        at: At::Pos(i),
        kind,
        required: true,
        help,
        complete: Complete::None,
        conflicts: None,
        json: None,
    }
}

/// An optional positional argument (argparse `nargs='?'`).
pub const fn pos_opt(i: usize, key: &'static str, kind: ValueKind, help: &'static str) -> ArgSpec {
    ArgSpec {
        required: false,
        ..pos(i, key, kind, help)
    }
}

/// An option with a short and a long name.
pub const fn o(
    short: char,
    long: &'static str,
    key: &'static str,
    kind: ValueKind,
    help: &'static str,
) -> ArgSpec {
    ArgSpec {
        key,
        at: At::Opt(Some(short), long),
        kind,
        required: false,
        help,
        complete: Complete::None,
        conflicts: None,
        json: None,
    }
}

/// An option with only a long name.
pub const fn l(
    long: &'static str,
    key: &'static str,
    kind: ValueKind,
    help: &'static str,
) -> ArgSpec {
    ArgSpec {
        key,
        at: At::Opt(None, long),
        kind,
        required: false,
        help,
        complete: Complete::None,
        conflicts: None,
        json: None,
    }
}

/// A parameter with no command-line form (see [`At::Key`]).
pub const fn key(key: &'static str, json: JsonType, help: &'static str) -> ArgSpec {
    ArgSpec {
        key,
        at: At::Key,
        kind: Str,
        required: false,
        help,
        complete: Complete::None,
        conflicts: None,
        json: Some(json),
    }
}

/// What the command lines print of a result (rpc.py's choice of printer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prints {
    /// Nothing (rpc.py does not print the `true` of most setters and deletes).
    Nothing,
    /// The result as JSON, a string without its quotes (a created bdev's name).
    Json,
    /// The result as indented JSON.
    Dict,
}

/// What running a method means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// One JSON-RPC call with the built parameters.
    Call,
    /// rpc.py's `save_config`: `framework_get_subsystems`, then `framework_get_config` for
    /// each (selected) subsystem, printed as one configuration.
    SaveConfig,
    /// rpc.py's `load_config`: apply a configuration in RPC-state passes.
    LoadConfig,
    /// rpc.py's `save_subsystem_config`.
    SaveSubsystemConfig,
    /// rpc.py's `load_subsystem_config`.
    LoadSubsystemConfig,
}

/// One method's command line.
#[derive(Debug, Clone, Copy)]
pub struct MethodSpec {
    /// Method (and subcommand) name.
    pub name: &'static str,
    /// One line of help.
    pub about: &'static str,
    /// Its arguments, in request key order.
    pub args: &'static [ArgSpec],
    /// rpc.py's `group_as`: these keys go into one object under the first name, placed last.
    pub group: Option<(&'static str, &'static [&'static str])>,
    /// Single-dash multi-letter option names rpc.py has (argparse allows `-t1`, clap does
    /// not), rewritten to the long name before parsing.
    pub aliases: &'static [(&'static str, &'static str)],
    /// Whether `discovery` in the `nqn` argument means the discovery NQN (rpc.py does this
    /// client-side for listeners).
    pub discovery_alias: bool,
    /// What running it means.
    pub action: Action,
    /// What `rtgt-rpc` prints of its result (`rtgt rpc` always prints JSON).
    pub prints: Prints,
}

/// A method that runs one call, with these arguments.
pub const fn m(name: &'static str, about: &'static str, args: &'static [ArgSpec]) -> MethodSpec {
    MethodSpec {
        name,
        about,
        args,
        group: None,
        aliases: &[],
        discovery_alias: false,
        action: Action::Call,
        prints: Prints::Nothing,
    }
}

/// rpc.py's `group_as`: `keys` go into one object named `name`.
pub const fn grouped(
    mut s: MethodSpec,
    name: &'static str,
    keys: &'static [&'static str],
) -> MethodSpec {
    s.group = Some((name, keys));
    s
}

/// A method whose result rpc.py prints with `p`.
pub const fn prints(mut s: MethodSpec, p: Prints) -> MethodSpec {
    s.prints = p;
    s
}

/// A method that runs `a` rather than one call.
pub const fn action(mut s: MethodSpec, a: Action) -> MethodSpec {
    s.action = a;
    s
}

/// `discovery` in the `nqn` argument stands for the discovery NQN.
pub const fn discovery(mut s: MethodSpec) -> MethodSpec {
    s.discovery_alias = true;
    s
}

/// Single-dash multi-letter option names rewritten to long names before parsing.
pub const fn aliased(mut s: MethodSpec, a: &'static [(&'static str, &'static str)]) -> MethodSpec {
    s.aliases = a;
    s
}

impl MethodSpec {
    /// Its positional arguments, in command-line order.
    pub fn positionals(&self) -> Vec<&'static ArgSpec> {
        let mut v: Vec<&'static ArgSpec> = self.args.iter().filter(|a| a.is_positional()).collect();
        v.sort_by_key(|a| match a.at {
            At::Pos(i) => i,
            At::Opt(..) | At::Key => usize::MAX,
        });
        v
    }

    /// The option whose short (`-x`) or long (`--xyz`) form is `flag`.
    pub fn option(&self, flag: &str) -> Option<&'static ArgSpec> {
        let args: &'static [ArgSpec] = self.args;
        if let Some(long) = flag.strip_prefix("--") {
            let long = long.split('=').next().unwrap_or(long);
            return args.iter().find(|a| {
                a.long() == Some(long)
                    || (matches!(a.kind, Toggle(_)) && long.strip_prefix("no-") == a.long())
            });
        }
        let mut chars = flag.strip_prefix('-')?.chars();
        let c = chars.next()?;
        args.iter().find(|a| a.short() == Some(c))
    }
}

impl ArgSpec {
    /// The JSON type of the value this argument sends.
    pub fn json_kind(&self) -> JsonType {
        if let Some(k) = self.json {
            return k;
        }
        match self.kind {
            Str | Choice(_) => JsonType::Str,
            Int | IntIn(..) => JsonType::Int,
            Flag | FlagOff | FlagIfGiven | Toggle(_) => JsonType::Bool,
            List | ListOf(_) => JsonType::StrList,
            IntList => JsonType::UintList,
            FlagSet(names) => JsonType::Flags(names),
            SizeMib { .. } => JsonType::Uint(64),
            KeyValue => JsonType::StrMap,
        }
    }

    /// The parameter it fills (key, JSON type, whether required).
    pub fn param(&self) -> Param {
        Param {
            name: self.key,
            kind: self.json_kind(),
            required: self.required,
        }
    }
}
