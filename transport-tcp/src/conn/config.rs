//! Per-connection settings, from the transport's options (`nvmf_create_transport -t TCP`).

use crate::pdu::{ADMIN_IN_CAPSULE_DATA, MAX_PDA, MIN_MAXH2CDATA};

/// Most R2Ts this controller keeps outstanding per command (the host's MAXR2T may lower it).
pub const MAX_R2T_PER_COMMAND: u8 = 16;

/// What a connection allows and how it moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Command slots: the largest queue the connection may carry (max of `max_queue_depth` and
    /// `max_aq_depth`; which queue a connection carries is known only after Connect).
    pub queue_depth: u16,
    /// In-capsule data bytes an I/O command may carry (`in_capsule_data_size`). Admin-queue
    /// and fabrics commands may always carry up to 8 KiB.
    pub in_capsule_data_size: u32,
    /// Largest data transfer of one command (`max_io_size`): longer transfer data blocks move
    /// no data (the core answers with Invalid Field, the MDTS rule).
    pub max_io_size: u32,
    /// MAXH2CDATA advertised in ICResp: most data bytes per H2CData PDU (≥ 4096, a multiple
    /// of 4).
    pub maxh2cdata: u32,
    /// Most bytes one R2T asks for (a command needing more gets several R2Ts).
    pub r2t_size: u32,
    /// Most R2Ts outstanding per command, 1..=16 (the host's MAXR2T + 1 caps it further).
    pub max_r2t_per_command: u8,
    /// Most data bytes per C2HData PDU: reads are split into PDUs of this size.
    pub c2h_chunk: u32,
    /// Set SUCCESS in the last C2HData PDU of a successful read and send no response capsule,
    /// when the host disabled SQ flow control (SPDK's `c2h_success`).
    pub c2h_success: bool,
    /// CPDA advertised in ICResp: alignment of H2C data, 0's based dwords (the Linux host before
    /// 6.x refuses anything but 0).
    pub cpda: u8,
}

impl Default for Config {
    /// SPDK's TCP defaults: depth 128, 4 KiB in-capsule, 128 KiB I/O; one R2T and one C2HData
    /// PDU per command; SUCCESS optimisation on.
    fn default() -> Self {
        Config {
            queue_depth: 128,
            in_capsule_data_size: 4096,
            max_io_size: 128 * 1024,
            maxh2cdata: 128 * 1024,
            r2t_size: 128 * 1024,
            max_r2t_per_command: 1,
            c2h_chunk: 128 * 1024,
            c2h_success: true,
            cpda: 0,
        }
    }
}

/// A setting that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.queue_depth < 2 {
            return Err(ConfigError("queue_depth must be at least 2"));
        }
        if self.max_io_size < 4096 {
            return Err(ConfigError("max_io_size must be at least 4096"));
        }
        if self.maxh2cdata < MIN_MAXH2CDATA || !self.maxh2cdata.is_multiple_of(4) {
            return Err(ConfigError(
                "MAXH2CDATA must be a multiple of 4 and at least 4096",
            ));
        }
        if self.r2t_size == 0 || self.c2h_chunk == 0 {
            return Err(ConfigError("R2T and C2HData sizes must be non-zero"));
        }
        if self.max_r2t_per_command == 0 || self.max_r2t_per_command > MAX_R2T_PER_COMMAND {
            return Err(ConfigError("max_r2t_per_command must be 1..=16"));
        }
        if self.cpda > MAX_PDA {
            return Err(ConfigError("CPDA must be 0..=31"));
        }
        if self.in_capsule_data_size > self.max_io_size.max(ADMIN_IN_CAPSULE_DATA) {
            return Err(ConfigError(
                "in_capsule_data_size must not exceed max_io_size",
            ));
        }
        Ok(())
    }
}
