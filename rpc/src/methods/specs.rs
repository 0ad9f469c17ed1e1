//! The spec of every method the rpc crate implements (the bdev modules declare theirs, the
//! transports their options and attributes): its parameters, with rpc.py's command line.
//!
//! It is the one declaration of a method's parameters. The rpc crate checks each request
//! against it before decoding it ([`crate::request_check::checked_params`]; a test fails when a
//! handler's parameter struct and its spec disagree), `rtgt rpc` and `rtgt shell` build their
//! parsers, help and completion from it, and the Python package's `rtgt-rpc` reads
//! `python/src/rtgt/methods.json`, generated from it ([`all`], [`rpc_spec::describe`]).
//!
//! The order of [`MethodSpec::args`] is the order of the keys in the request, which is the
//! order rpc.py sends them in (its keyword arguments, or argparse's declaration order);
//! positional arguments carry their own position. rtgt's own methods (`nvmf_subsystem_pause`,
//! `nvmf_subsystem_resume`) follow the same style.

use std::sync::OnceLock;

use rpc_spec::ValueKind::*;
use rpc_spec::{
    ArgSpec, Complete, JsonType, MethodSpec, Prints, aliased, discovery, grouped, key, l, m, o,
    pos, pos_opt, prints,
};
use target_core::registry::{self, TransportAttr};

use super::nvmf::PASSTHRU;

const TGT_T: ArgSpec = o(
    't',
    "tgt-name",
    "tgt_name",
    Str,
    "Parent NVMe-oF target name",
);
const TGT_P: ArgSpec = o(
    'p',
    "tgt-name",
    "tgt_name",
    Str,
    "Parent NVMe-oF target name",
);
const NQN: ArgSpec = pos(0, "nqn", Str, "Subsystem NQN").comp(Complete::Nqn);
const LOG_LEVELS: &[&str] = &["ERROR", "WARNING", "NOTICE", "INFO", "DEBUG"];
const ANA_STATES: &[&str] = &["optimized", "non_optimized", "inaccessible"];
const ONCS: &[&str] = &["nvmcmps", "nvmdsmsv", "nvmwzsv", "reservs", "nvmcpys"];
const ADRFAMS: &[&str] = &["ipv4", "ipv6", "ib", "fc", "intra_host"];

/// The listener address options of rpc.py's `*_listener` commands (grouped as
/// `listen_address`).
#[rustfmt::skip]
macro_rules! listener_args {
    (@ [$($head:expr),*] [$($mid:expr),*] [$($extra:expr),*]) => {
        &[
            $($head,)*
            NQN,
            o('t', "trtype", "trtype", Str, "NVMe-oF transport type: e.g., rdma").req().comp(Complete::Transport),
            o('a', "traddr", "traddr", Str, "NVMe-oF transport address: e.g., an ip address").req().comp(Complete::Traddr),
            $($mid,)*
            o('f', "adrfam", "adrfam", Choice(ADRFAMS), "NVMe-oF transport adrfam: ipv4, ipv6, ib, fc"),
            o('s', "trsvcid", "trsvcid", Str, "NVMe-oF transport service id: e.g., a port number").comp(Complete::Trsvcid),
            $($extra),*
        ]
    };
    // rpc.py's add_listener puts `tgt_name` first (apply_defaults), remove_listener does not.
    (tgt_first; $($extra:expr),* $(,)?) => { listener_args!(@ [TGT_P] [] [$($extra),*]) };
    ($($extra:expr),* $(,)?) => { listener_args!(@ [] [TGT_P] [$($extra),*]) };
}

/// Every method rtgt implements itself, plus rpc.py's client-side configuration commands (the
/// bdev modules declare theirs: [`all`] lists both).
#[rustfmt::skip]
pub const METHODS: &[MethodSpec] = &[
    // ----- framework and core -----
    prints(m("rpc_get_methods", "Get list of supported RPC methods", &[
        o('c', "current", "current", Flag, "Only methods callable in the current RPC state"),
        o('i', "include-aliases", "include_aliases", Flag, "Include deprecated aliases"),
    ]), Prints::Dict),
    prints(m("spdk_get_version", "Get the SPDK (RPC compatibility) and rtgt versions", &[]), Prints::Json),
    m("spdk_kill_instance", "Send a signal to the target", &[
        pos(0, "sig_name", Choice(&["SIGINT", "SIGTERM", "SIGQUIT", "SIGHUP", "SIGKILL", "SIGUSR1"]), "Signal to send"),
    ]),
    m("framework_start_init", "Start initialization of subsystems (after --wait-for-rpc)", &[]),
    m("framework_wait_init", "Block until subsystems have been initialized", &[]),
    prints(m("framework_get_subsystems", "Print subsystems in initialization order with their dependencies", &[]), Prints::Dict),
    prints(m("framework_get_config", "Print a subsystem's configuration", &[
        pos(0, "name", Str, "Name of the subsystem").comp(Complete::FwSubsystem),
        l("with-batches", "with_batches", Toggle(Some(false)), "Keep batch arrays in the output"),
    ]), Prints::Dict),
    prints(m("framework_get_reactors", "Display the reactors and their poll groups", &[]), Prints::Dict),
    prints(m("framework_get_scheduler", "Display currently set scheduler and its properties", &[]), Prints::Dict),
    prints(m("thread_get_stats", "Display current statistics of all the threads", &[]), Prints::Dict),
    prints(m("thread_get_pollers", "Display current pollers of all the threads", &[]), Prints::Dict),
    prints(m("thread_get_io_channels", "Display current IO channels of all the threads", &[]), Prints::Dict),
    m("framework_set_scheduler", "Select the thread scheduler (rtgt: static only; recorded)", &[
        pos(0, "name", Str, "Scheduler name"),
        o('p', "period", "period", Int, "Scheduler period in microseconds").json(JsonType::Uint(64)),
        l("load-limit", "load_limit", Int, "Thread load percentage above which threads may move").json(JsonType::Uint(8)),
        l("core-limit", "core_limit", Int, "Core busy percentage at which the core is full").json(JsonType::Uint(8)),
        l("core-busy", "core_busy", Int, "Core busy percentage at which threads move").json(JsonType::Uint(8)),
        l("mappings", "mappings", Str, "Comma-separated thread:core mappings"),
    ]),
    m("log_set_level", "Set the log level", &[pos(0, "level", Choice(LOG_LEVELS), "Log level")]),
    prints(m("log_get_level", "Get the log level", &[]), Prints::Dict),
    m("log_set_print_level", "Set the log print level", &[pos(0, "level", Choice(LOG_LEVELS), "Log print level")]),
    prints(m("log_get_print_level", "Get the log print level", &[]), Prints::Dict),
    m("log_set_flag", "Set a log flag", &[pos(0, "flag", Str, "Log flag name, or all")]),
    m("log_clear_flag", "Clear a log flag", &[pos(0, "flag", Str, "Log flag name, or all")]),
    prints(m("log_get_flags", "Get the log flags", &[]), Prints::Dict),
    // ----- bdev -----
    // The bdev modules' methods (malloc, null, aio, delay, rbd, ...) are declared by the
    // modules themselves: [`all`].
    prints(m("bdev_get_bdevs", "Display all bdevs or one", &[
        o('b', "name", "name", Str, "Name of the bdev").comp(Complete::Bdev),
        o('t', "timeout-ms", "timeout", Int, "Time in ms to wait for the bdev to appear"),
    ]), Prints::Dict),
    prints(m("bdev_get_iostat", "Display I/O statistics of all bdevs or of some", &[
        key("name", JsonType::Str, "One bdev (older clients; --names in rpc.py)"),
        o('c', "per-channel", "per_channel", Flag, "Per channel statistics (one bdev)"),
        l("reset-mode", "reset_mode", Choice(&["all", "maxmin", "none"]), "Reset after reading"),
        l("names", "names", List, "Comma-separated bdev names").comp(Complete::Bdev),
    ]), Prints::Dict),
    m("bdev_set_qos_limit", "Set QoS rate limits on a bdev", &[
        pos(0, "name", Str, "Name of the bdev").comp(Complete::Bdev),
        l("rw_ios_per_sec", "rw_ios_per_sec", Int, "R/W IOs per second limit (>=1000, multiple of 1000; 0 removes it)"),
        l("rw_mbytes_per_sec", "rw_mbytes_per_sec", Int, "R/W megabytes per second limit (0 removes it)"),
        l("r_mbytes_per_sec", "r_mbytes_per_sec", Int, "Read megabytes per second limit (0 removes it)"),
        l("w_mbytes_per_sec", "w_mbytes_per_sec", Int, "Write megabytes per second limit (0 removes it)"),
    ]),
    m("bdev_reset_iostat", "Reset I/O statistics of all bdevs or of one", &[
        o('b', "name", "name", Str, "Name of the bdev").comp(Complete::Bdev),
        o('m', "mode", "mode", Choice(&["all", "maxmin"]), "What to reset (default all)"),
    ]),
    prints(m("bdev_get_latency_histogram", "Display the latency histograms of all bdevs or of one (rtgt)", &[
        o('b', "name", "name", Str, "Name of the bdev").comp(Complete::Bdev),
    ]), Prints::Dict),
    m("bdev_enable_histogram", "Enable or disable histogram for specified bdev", &[
        pos(0, "name", Str, "bdev name").comp(Complete::Bdev),
        l("histogram", "enable", Toggle(None), "Enable or disable histograms on specified device").req(),
        o('o', "opc", "opc", Choice(&["read", "write", "flush", "unmap", "write_zeroes", "compare"]), "Enable histogram for specified io type (default: all)"),
        l("granularity", "granularity", Int, "Histogram bucket granularity (1-12)").json(JsonType::Uint(32)),
        l("min-nsec", "min_nsec", Int, "Histogram min value in nanoseconds").json(JsonType::Uint(64)),
        l("max-nsec", "max_nsec", Int, "Histogram max value in nanoseconds").json(JsonType::Uint(64)),
    ]),
    prints(m("bdev_get_histogram", "Get histogram for specified bdev", &[
        pos(0, "name", Str, "bdev name").comp(Complete::Bdev),
    ]), Prints::Dict),
    prints(m("bdev_get_histogram_borders", "Dump histogram for specified bdev into user-provided borders", &[
        pos(0, "name", Str, "bdev name").comp(Complete::Bdev),
        l("borders", "borders", IntList, "Comma-separated ascending borders in nanoseconds (rtgt's tick)").req(),
    ]), Prints::Dict),
    m("bdev_wait_for_examine", "Report when all bdevs have been examined", &[]),
    m("bdev_set_options", "Set bdev layer options (recorded)", &[
        o('p', "bdev-io-pool-size", "bdev_io_pool_size", Int, "Number of bdev_io structures in the pool").json(JsonType::Uint(32)),
        o('c', "bdev-io-cache-size", "bdev_io_cache_size", Int, "bdev_io structures cached per thread").json(JsonType::Uint(32)),
        l("auto-examine", "bdev_auto_examine", Toggle(None), "Enable or disable auto examine"),
        l("iobuf-small-cache-size", "iobuf_small_cache_size", Int, "Small iobuf per-thread cache").json(JsonType::Uint(32)),
        l("iobuf-large-cache-size", "iobuf_large_cache_size", Int, "Large iobuf per-thread cache").json(JsonType::Uint(32)),
    ]),
    m("bdev_raid_set_options", "Set bdev raid options (recorded)", &[
        o('w', "process-window-size-kb", "process_window_size_kb", Int, "Background process window size in KiB").json(JsonType::Uint(32)),
        o('b', "process-max-bandwidth-mb-sec", "process_max_bandwidth_mb_sec", Int, "Background process bandwidth limit in MiB/s").json(JsonType::Uint(32)),
    ]),
    m("bdev_iscsi_set_options", "Set bdev iSCSI options (recorded)", &[
        o('t', "timeout-sec", "timeout_sec", Int, "Command timeout in seconds (0: none)").json(JsonType::Uint(64)),
    ]),
    grouped(m("bdev_nvme_set_options", "Set bdev NVMe options (recorded)", &[
        o('a', "action-on-timeout", "action_on_timeout", Choice(&["none", "reset", "abort"]), "Action on command timeout"),
        o('t', "timeout-us", "timeout_us", Int, "Command timeout in microseconds").json(JsonType::Uint(64)),
        l("timeout-admin-us", "timeout_admin_us", Int, "Admin command timeout in microseconds").json(JsonType::Uint(64)),
        o('k', "keep-alive-timeout-ms", "keep_alive_timeout_ms", Int, "Keep alive timeout in ms").json(JsonType::Uint(32)),
        l("arbitration-burst", "arbitration_burst", Int, "Arbitration burst (power of two)").json(JsonType::Uint(32)),
        l("low-priority-weight", "low_priority_weight", Int, "Low priority queue weight").json(JsonType::Uint(32)),
        l("medium-priority-weight", "medium_priority_weight", Int, "Medium priority queue weight").json(JsonType::Uint(32)),
        l("high-priority-weight", "high_priority_weight", Int, "High priority queue weight").json(JsonType::Uint(32)),
        o('p', "nvme-adminq-poll-period-us", "nvme_adminq_poll_period_us", Int, "Admin queue poll period").json(JsonType::Uint(64)),
        o('i', "nvme-ioq-poll-period-us", "nvme_ioq_poll_period_us", Int, "I/O queue poll period").json(JsonType::Uint(64)),
        o('s', "io-queue-requests", "io_queue_requests", Int, "Requests per I/O queue").json(JsonType::Uint(32)),
        o('d', "disable-delay-cmd-submit", "delay_cmd_submit", FlagOff, "Disable delayed command submission"),
        o('c', "transport-retry-count", "transport_retry_count", Int, "Transport-level retries per I/O").json(JsonType::Uint(32)),
        o('r', "bdev-retry-count", "bdev_retry_count", Int, "Bdev-level retries per I/O (-1: infinite)").json(JsonType::I32),
        o('e', "transport-ack-timeout", "transport_ack_timeout", Int, "Transport ACK timeout (0-31)").json(JsonType::Uint(8)),
        o('l', "ctrlr-loss-timeout-sec", "ctrlr_loss_timeout_sec", Int, "Controller loss timeout").json(JsonType::I32),
        o('o', "reconnect-delay-sec", "reconnect_delay_sec", Int, "Reconnect delay").json(JsonType::Uint(32)),
        o('u', "fast-io-fail-timeout-sec", "fast_io_fail_timeout_sec", Int, "Fast I/O fail timeout").json(JsonType::Uint(32)),
        o('f', "disable-auto-failback", "disable_auto_failback", Flag, "Disable automatic failback"),
        l("generate-uuids", "generate_uuids", Flag, "Generate UUIDs for namespaces without one"),
        l("transport-tos", "transport_tos", Int, "IPv4 type of service (RDMA)").json(JsonType::Uint(8)),
        o('m', "nvme-error-stat", "nvme_error_stat", Flag, "Collect NVMe error counts"),
        o('q', "rdma-srq-size", "rdma_srq_size", Int, "Shared receive queue size (0: off)").json(JsonType::Uint(32)),
        l("io-path-stat", "io_path_stat", Flag, "Collect I/O path statistics"),
        l("allow-accel-sequence", "allow_accel_sequence", Flag, "Allow accel sequences"),
        l("rdma-max-cq-size", "rdma_max_cq_size", Int, "Maximum RDMA completion queue size").json(JsonType::Uint(32)),
        l("rdma-cm-event-timeout-ms", "rdma_cm_event_timeout_ms", Int, "RDMA CM event timeout").json(JsonType::Uint(16)),
        l("dhchap-digests", "dhchap_digests", List, "Comma-separated DH-HMAC-CHAP digests"),
        l("dhchap-dhgroups", "dhchap_dhgroups", List, "Comma-separated DH-HMAC-CHAP DH groups"),
        l("rdma-umr-per-io", "rdma_umr_per_io", Toggle(None), "Memory region per I/O"),
        l("tcp-connect-timeout-ms", "tcp_connect_timeout_ms", Int, "TCP connect timeout").json(JsonType::Uint(32)),
        l("enable-flush", "enable_flush", Flag, "Pass flush to NVMe with a volatile write cache"),
        l("policy", "policy", Choice(&["active_passive", "active_active"]), "Multipath policy"),
        l("selector", "selector", Choice(&["round_robin", "queue_depth"]), "Multipath selector"),
        l("min-io", "min_io", Int, "I/Os per path before switching (round_robin)"),
        key("retry_count", JsonType::Uint(32), "Also accepted (SPDK's older releases)"),
    ]), "multipath_opts", &["policy", "selector", "min_io"]),
    m("bdev_nvme_set_hotplug", "Set bdev NVMe hotplug options (recorded)", &[
        l("hotplug", "enable", Toggle(None), "Enable or disable hotplug").req(),
        o('r', "period-us", "period_us", Int, "Hotplug poll period in microseconds").json(JsonType::Uint(64)),
    ]),
    // ----- option setters of other subsystems (recorded for save_config) -----
    m("iobuf_set_options", "Set iobuf pool options (recorded)", &[
        l("small-pool-count", "small_pool_count", Int, "Small buffers in the pool").json(JsonType::Uint(64)),
        l("large-pool-count", "large_pool_count", Int, "Large buffers in the pool").json(JsonType::Uint(64)),
        l("small-bufsize", "small_bufsize", Int, "Small buffer size").json(JsonType::Uint(32)),
        l("large-bufsize", "large_bufsize", Int, "Large buffer size").json(JsonType::Uint(32)),
        l("enable-numa", "enable_numa", Flag, "Per-NUMA-node pools"),
    ]),
    m("sock_set_default_impl", "Set the default socket implementation (recorded)", &[
        o('i', "impl", "impl_name", Str, "Socket implementation name").req(),
    ]),
    m("sock_impl_set_options", "Set options of a socket implementation (recorded)", &[
        o('i', "impl", "impl_name", Str, "Socket implementation name").req(),
        o('r', "recv-buf-size", "recv_buf_size", Int, "Receive buffer size").json(JsonType::Uint(32)),
        o('s', "send-buf-size", "send_buf_size", Int, "Send buffer size").json(JsonType::Uint(32)),
        l("recv-pipe", "enable_recv_pipe", Toggle(None), "Receive pipe"),
        l("quickack", "enable_quickack", Toggle(None), "Quick ACK"),
        o('p', "enable-placement-id", "enable_placement_id", Int, "Placement id source (0, 1, 2)").json(JsonType::Uint(32)),
        l("zerocopy-send-server", "enable_zerocopy_send_server", Toggle(None), "Zero-copy send on server sockets"),
        l("zerocopy-send-client", "enable_zerocopy_send_client", Toggle(None), "Zero-copy send on client sockets"),
        l("zerocopy-threshold", "zerocopy_threshold", Int, "Zero-copy threshold in bytes").json(JsonType::Uint(32)),
        l("tls-version", "tls_version", Int, "TLS version").json(JsonType::Uint(32)),
        l("ktls", "enable_ktls", Toggle(None), "Kernel TLS"),
        key("enable_zerocopy_send", JsonType::Bool, "Also accepted (SPDK's older releases)"),
    ]),
    m("vmd_enable", "Enable VMD enumeration (recorded)", &[]),
    m("accel_set_options", "Set accel framework options (recorded)", &[
        l("small-cache-size", "small_cache_size", Int, "Small iobuf cache size").json(JsonType::Uint(32)),
        l("large-cache-size", "large_cache_size", Int, "Large iobuf cache size").json(JsonType::Uint(32)),
        l("task-count", "task_count", Int, "Tasks per channel").json(JsonType::Uint(32)),
        l("sequence-count", "sequence_count", Int, "Sequences per channel").json(JsonType::Uint(32)),
        l("buf-count", "buf_count", Int, "Accel buffers per channel").json(JsonType::Uint(32)),
    ]),
    m("accel_assign_opc", "Assign an accel operation to a module (recorded)", &[
        o('o', "opname", "opname", Str, "Operation name").req(),
        o('m', "module", "module", Str, "Module name").req(),
    ]),
    // ----- keyring -----
    m("keyring_file_add_key", "Add a file-based key to the keyring", &[
        pos(0, "name", Str, "Name of the key"),
        pos(1, "path", Str, "Absolute path of the key file (mode 0600)").comp(Complete::File),
    ]),
    m("keyring_file_remove_key", "Remove a file-based key", &[
        pos(0, "name", Str, "Name of the key").comp(Complete::Key),
    ]),
    prints(m("keyring_get_keys", "List the keys", &[]), Prints::Dict),
    m("keyring_linux_set_options", "Set keyring_linux options (recorded)", &[
        o('e', "enable", "enable", Flag, "Enable the Linux keyring module"),
    ]),
    // ----- nvmf -----
    m("nvmf_set_max_subsystems", "Set the maximum number of subsystems (STARTUP only)", &[
        o('x', "max-subsystems", "max_subsystems", Int, "Maximum number of subsystems").req(),
    ]),
    m("nvmf_set_config", "Set target options (STARTUP only)", &[
        o('p', "passthru-admin-cmds", "admin_cmd_passthru", FlagSet(PASSTHRU), "Comma-separated admin commands to pass through, or all"),
        o('m', "poll-groups-mask", "poll_groups_mask", Str, "CPU mask of the poll groups"),
        o('d', "discovery-filter", "discovery_filter", Str, "Deprecated; use --discovery-filters").conflicts("discovery_filters"),
        l("discovery-filters", "discovery_filters", ListOf(&["match_any", "transport", "address", "svcid"]), "Comma-separated discovery filters"),
        l("dhchap-digests", "dhchap_digests", List, "Comma-separated DH-HMAC-CHAP digests"),
        l("dhchap-dhgroups", "dhchap_dhgroups", List, "Comma-separated DH-HMAC-CHAP DH groups"),
        l("dup-host-policy", "dup_host_policy", Choice(&["allow", "restrict_per_listener"]), "Duplicate host policy"),
    ]),
    m("nvmf_create_transport", "Create a transport (RDMA, SRP)", &[
        o('r', "no-srq", "no_srq", Flag, "Disable the shared receive queue (RDMA)"),
        o('o', "c2h-success", "c2h_success", FlagOff, "Disable C2H success optimization (TCP)"),
        o('t', "trtype", "trtype", Str, "Transport type: a linked transport's name (RDMA, SRP, ...)").req().comp(Complete::TransportKind),
        o('g', "tgt-name", "tgt_name", Str, "Parent NVMe-oF target name"),
        o('q', "max-queue-depth", "max_queue_depth", Int, "Max number of outstanding I/O per queue"),
        o('m', "max-io-qpairs-per-ctrlr", "max_io_qpairs_per_ctrlr", Int, "Max number of I/O qpairs per controller"),
        o('c', "in-capsule-data-size", "in_capsule_data_size", Int, "Max in-capsule data size"),
        o('i', "max-io-size", "max_io_size", Int, "Max I/O size (bytes)"),
        o('u', "io-unit-size", "io_unit_size", Int, "I/O unit size (bytes)"),
        o('a', "max-aq-depth", "max_aq_depth", Int, "Max number of admin commands per admin queue"),
        o('n', "num-shared-buffers", "num_shared_buffers", Int, "Number of pooled data buffers"),
        o('b', "buf-cache-size", "buf_cache_size", Int, "Shared buffers reserved per poll group (deprecated)").conflicts("iobuf_small_cache_size"),
        l("iobuf-small-cache-size", "iobuf_small_cache_size", Int, "Small iobuf buffers reserved per poll group"),
        l("iobuf-large-cache-size", "iobuf_large_cache_size", Int, "Large iobuf buffers reserved per poll group"),
        o('z', "zcopy", "zcopy", Flag, "Use zero-copy operations"),
        o('d', "num-cqe", "num_cqe", Int, "Number of CQ entries without SRQ (RDMA)"),
        o('s', "max-srq-depth", "max_srq_depth", Int, "Per-poll-group shared receive queue size (RDMA)"),
        o('f', "dif-insert-or-strip", "dif_insert_or_strip", Flag, "DIF insert/strip (TCP)"),
        o('y', "sock-priority", "sock_priority", Int, "Socket priority (TCP)"),
        o('l', "acceptor-backlog", "acceptor_backlog", Int, "Pending connections allowed in the backlog (RDMA)"),
        o('x', "abort-timeout-sec", "abort_timeout_sec", Int, "Abort execution timeout, in seconds"),
        o('w', "no-wr-batching", "no_wr_batching", Flag, "Disable work request batching (RDMA)"),
        o('e', "control-msg-num", "control_msg_num", Int, "Control messages per poll group (TCP)"),
        o('M', "disable-mappable-bar0", "disable_mappable_bar0", Flag, "Disable mmap of BAR0 (VFIO-USER)"),
        o('I', "disable-adaptive-irq", "disable_adaptive_irq", Flag, "Disable adaptive interrupts (VFIO-USER)"),
        o('S', "disable-shadow-doorbells", "disable_shadow_doorbells", Flag, "Disable shadow doorbells (VFIO-USER)"),
        l("acceptor-poll-rate", "acceptor_poll_rate", Int, "Acceptor poll period (microseconds)"),
        l("ack-timeout", "ack_timeout", Int, "ACK timeout in milliseconds"),
        l("data-wr-pool-size", "data_wr_pool_size", Int, "RDMA data WR pool size (RDMA)"),
        l("disable-command-passthru", "disable_command_passthru", Flag, "Do not pass unknown I/O opcodes to the bdev"),
        l("kas", "kas", Int, "Keep alive timeout granularity, in 100 ms"),
        l("min-kato", "min_kato", Int, "Minimum keep alive timeout in ms"),
        l("masked-oncs", "masked_oncs", ListOf(ONCS), "Comma-separated ONCS features to mask, or all"),
        l("masked-fuses", "masked_fuses", ListOf(&["fcws"]), "Comma-separated FUSES features to mask, or all"),
        // A transport's own options (SRP's) come from its declaration: [`all`].
    ]),
    prints(m("nvmf_get_transports", "Display transports or one transport", &[
        l("trtype", "trtype", Str, "Transport type").comp(Complete::Transport),
        TGT_T,
    ]), Prints::Dict),
    prints(m("nvmf_get_subsystems", "Display subsystems or one subsystem", &[
        pos_opt(0, "nqn", Str, "Subsystem NQN").comp(Complete::Nqn),
        TGT_T,
    ]), Prints::Dict),
    m("nvmf_create_subsystem", "Create an NVMe-oF subsystem", &[
        pos(0, "nqn", Str, "Subsystem NQN"),
        TGT_T,
        o('s', "serial-number", "serial_number", Str, "Serial number of the virtual controller"),
        o('d', "model-number", "model_number", Str, "Model number of the virtual controller"),
        o('a', "allow-any-host", "allow_any_host", Flag, "Allow any host to connect"),
        o('m', "max-namespaces", "max_namespaces", Int, "Maximum number of namespaces"),
        o('r', "ana-reporting", "ana_reporting", Flag, "Enable ANA reporting"),
        o('i', "min-cntlid", "min_cntlid", Int, "Minimum controller ID"),
        o('I', "max-cntlid", "max_cntlid", Int, "Maximum controller ID"),
        l("dmrsl", "dmrsl", Int, "Dataset Management range size limit (blocks)"),
        l("wzsl", "wzsl", Int, "Write Zeroes size limit (2^n pages)"),
        o('p', "passthrough", "passthrough", Flag, "NVMe passthrough (rtgt: not supported)"),
        o('n', "enable-nssr", "enable_nssr", Flag, "Enable NVM subsystem reset"),
        l("admin-label", "admin_label", Str, "Admin label (4-256 ASCII characters)"),
    ]),
    m("nvmf_delete_subsystem", "Delete a subsystem", &[NQN, TGT_T]),
    discovery(grouped(m("nvmf_subsystem_add_listener", "Add a listener to a subsystem", listener_args![tgt_first;
        o('k', "secure-channel", "secure_channel", Flag, "Require a secure channel (rtgt: not supported)"),
        o('n', "ana-state", "ana_state", Choice(ANA_STATES), "ANA state"),
        o('S', "sock-impl", "sock_impl", Str, "Socket implementation (TCP)"),
        l("numa-id", "numa_id", Int, "NUMA node (VFIO-USER)"),
    ]), "listen_address", &["trtype", "traddr", "adrfam", "trsvcid"])),
    discovery(grouped(m("nvmf_subsystem_remove_listener", "Remove a listener from a subsystem", listener_args![]),
        "listen_address", &["trtype", "traddr", "adrfam", "trsvcid"])),
    grouped(m("nvmf_subsystem_listener_set_ana_state", "Set the ANA state of a listener for one ANA group or all", listener_args!(@ [] [] [
        o('n', "ana-state", "ana_state", Choice(ANA_STATES), "ANA state to set: optimized, non_optimized or inaccessible").req(),
        TGT_P,
        o('g', "anagrpid", "anagrpid", Int, "ANA group ID (default: every group)")
    ])), "listen_address", &["trtype", "traddr", "adrfam", "trsvcid"]),
    prints(m("nvmf_subsystem_get_listeners", "Display the listeners of a subsystem", &[NQN, TGT_T]), Prints::Dict),
    grouped(prints(m("nvmf_subsystem_add_ns", "Add a namespace to a subsystem", &[
        o('t', "tgt-name", "tgt_name", Str, "Parent NVMe-oF target name"),
        NQN,
        pos(1, "bdev_name", Str, "Name of the bdev to expose").comp(Complete::FreeBdev),
        o('p', "ptpl-file", "ptpl_file", Str, "Persistent reservation file").comp(Complete::File),
        o('n', "nsid", "nsid", Int, "Namespace ID (default: lowest free)"),
        o('g', "nguid", "nguid", Str, "Namespace NGUID (32 hex digits)"),
        o('e', "eui64", "eui64", Str, "Namespace EUI-64 (16 hex digits)"),
        o('u', "uuid", "uuid", Str, "Namespace UUID"),
        o('a', "anagrpid", "anagrpid", Int, "ANA group ID"),
        o('i', "no-auto-visible", "no_auto_visible", Flag, "Do not make the namespace visible to every controller"),
        o('N', "hide-metadata", "hide_metadata", FlagIfGiven, "Deprecated (sent only when given, as rpc.py 26.09 has no such option)"),
    ]), Prints::Json), "namespace", &["bdev_name", "ptpl_file", "nsid", "nguid", "eui64", "uuid", "anagrpid", "no_auto_visible", "hide_metadata"]),
    m("nvmf_subsystem_set_ns_ana_group", "Move a namespace to another ANA group", &[
        NQN,
        pos(1, "nsid", Int, "Namespace ID").comp(Complete::Nsid),
        pos(2, "anagrpid", Int, "ANA group ID"),
        TGT_T,
    ]),
    m("nvmf_subsystem_remove_ns", "Remove a namespace from a subsystem", &[
        NQN,
        pos(1, "nsid", Int, "Namespace ID").comp(Complete::Nsid),
        TGT_T,
    ]),
    m("nvmf_subsystem_add_host", "Allow a host to connect to a subsystem", &[
        NQN,
        pos(1, "host", Str, "Host NQN (SRP: initiator port id, port GUID or IP address)"),
        TGT_T,
        l("psk", "psk", Str, "TLS pre-shared key name (rtgt: not supported)").comp(Complete::Key),
        l("dhchap-key", "dhchap_key", Str, "DH-HMAC-CHAP key name (keyring): the host must authenticate").comp(Complete::Key),
        l("dhchap-ctrlr-key", "dhchap_ctrlr_key", Str, "DH-HMAC-CHAP controller key name (bidirectional authentication)").comp(Complete::Key),
    ]),
    m("nvmf_subsystem_set_keys", "Set (rotate) the DH-HMAC-CHAP keys of a host; without --dhchap-key the host no longer authenticates", &[
        NQN,
        pos(1, "host", Str, "Host NQN").comp(Complete::Host),
        TGT_T,
        l("dhchap-key", "dhchap_key", Str, "DH-HMAC-CHAP key name (keyring)").comp(Complete::Key),
        l("dhchap-ctrlr-key", "dhchap_ctrlr_key", Str, "DH-HMAC-CHAP controller key name").comp(Complete::Key),
    ]),
    m("nvmf_subsystem_remove_host", "Remove a host from a subsystem (its connections are closed)", &[
        NQN,
        pos(1, "host", Str, "Host NQN").comp(Complete::Host),
        TGT_T,
        o('T', "timeout-ms", "timeout_ms", Int, "How long to wait for the host's connections to close"),
    ]),
    m("nvmf_ns_add_host", "Make a namespace added with --no-auto-visible visible to a host", &[
        NQN,
        pos(1, "nsid", Int, "Namespace ID").comp(Complete::Nsid),
        pos(2, "host", Str, "Host NQN (SRP: initiator port id)"),
        TGT_T,
    ]),
    m("nvmf_ns_remove_host", "Hide a namespace added with --no-auto-visible from a host", &[
        NQN,
        pos(1, "nsid", Int, "Namespace ID").comp(Complete::Nsid),
        pos(2, "host", Str, "Host NQN (SRP: initiator port id)").comp(Complete::Host),
        TGT_T,
    ]),
    m("nvmf_subsystem_allow_any_host", "Allow any host, or only the listed hosts", &[
        NQN,
        l("allow-any-host", "allow_any_host", Toggle(None), "Allow any host (--no-allow-any-host: only listed hosts)").req(),
        TGT_T,
    ]),
    prints(m("nvmf_subsystem_get_controllers", "Display the controllers (SRP: sessions) of a subsystem", &[NQN, TGT_T]), Prints::Dict),
    prints(m("nvmf_subsystem_get_qpairs", "Display the queue pairs (SRP: channels) of a subsystem", &[NQN, TGT_T]), Prints::Dict),
    prints(m("nvmf_get_stats", "Display poll group and transport statistics", &[TGT_T]), Prints::Dict),
    aliased(m("nvmf_set_crdt", "Set the command retry delay times (STARTUP only), in 100 ms", &[
        l("crdt1", "crdt1", Int, "Command Retry Delay Time 1 (rpc.py: -t1)"),
        l("crdt2", "crdt2", Int, "Command Retry Delay Time 2 (rpc.py: -t2)"),
        l("crdt3", "crdt3", Int, "Command Retry Delay Time 3 (rpc.py: -t3)"),
    ]), &[("-t1", "--crdt1"), ("-t2", "--crdt2"), ("-t3", "--crdt3")]),
    // rtgt extensions
    m("nvmf_subsystem_pause", "rtgt: pause a subsystem's (or one namespace's) I/O; answers once in-flight I/O drained", &[
        NQN,
        o('n', "nsid", "nsid", Int, "Pause only this namespace").comp(Complete::Nsid),
        TGT_T,
    ]),
    m("nvmf_subsystem_resume", "rtgt: resume a paused subsystem (queued I/O is replayed)", &[NQN, TGT_T]),
];

/// Every method's spec: [`METHODS`], the registered bdev modules' methods, and the options
/// and attributes the registered transports declare added to `nvmf_create_transport`,
/// `nvmf_create_subsystem` and `nvmf_subsystem_add_listener`. Built once.
pub fn all() -> &'static [MethodSpec] {
    static ALL: OnceLock<Vec<MethodSpec>> = OnceLock::new();
    ALL.get_or_init(|| {
        let transports = registry::list();
        let mut out: Vec<MethodSpec> = METHODS
            .iter()
            .map(|s| {
                let extra: Vec<&TransportAttr> = match s.name {
                    "nvmf_create_transport" => transports.iter().flat_map(|t| t.options).collect(),
                    "nvmf_create_subsystem" => {
                        transports.iter().flat_map(|t| t.subsystem_attrs).collect()
                    }
                    "nvmf_subsystem_add_listener" => {
                        transports.iter().flat_map(|t| t.listener_attrs).collect()
                    }
                    _ => Vec::new(),
                };
                with_transport_attrs(*s, &extra)
            })
            .collect();
        out.extend(target_core::bdev::module::methods().map(|(_, f)| f.spec));
        out
    })
}

/// The spec of method `name`.
pub fn find(name: &str) -> Option<&'static MethodSpec> {
    all().iter().find(|s| s.name == name)
}

/// `spec` with the transport-declared `attrs` it lacks appended as long options (the first
/// declaration of a name wins).
fn with_transport_attrs(spec: MethodSpec, attrs: &[&TransportAttr]) -> MethodSpec {
    let mut args = spec.args.to_vec();
    for a in attrs {
        if args.iter().any(|x| x.key == a.name) {
            continue;
        }
        let kind = match a.kind {
            JsonType::Bool => Toggle(None),
            JsonType::Uint(_) | JsonType::I32 | JsonType::Int => Int,
            JsonType::StrList => List,
            JsonType::StrMap => KeyValue,
            _ => Str,
        };
        let arg = match a.long {
            Some(long) => l(long, a.name, kind, a.help),
            None => key(a.name, a.kind, a.help),
        };
        args.push(arg.json(a.kind));
    }
    if args.len() == spec.args.len() {
        return spec;
    }
    MethodSpec {
        args: Vec::leak(args),
        ..spec
    }
}
