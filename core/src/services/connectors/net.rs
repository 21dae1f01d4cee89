//! How datasources reach out: the egress policy and the caps on what a server may send.

use crate::config::Config;
use crate::egress::Egress;
use crate::error::Result;

/// How datasources reach their servers: the engine's egress policy, and what a server may send.
#[derive(Debug, Clone)]
pub(crate) struct Net {
    pub(crate) egress: Egress,
    /// `datasources.max_message_mb`, in bytes.
    pub(crate) max_message_bytes: usize,
    /// `datasources.max_tables`.
    pub(crate) max_tables: usize,
}

impl Net {
    /// The reach `config` describes.
    pub(crate) fn new(config: &Config) -> Result<Net> {
        Ok(Net {
            egress: config.egress()?,
            max_message_bytes: usize::try_from(
                config
                    .datasources
                    .max_message_mb
                    .saturating_mul(1024 * 1024),
            )
            .unwrap_or(usize::MAX),
            max_tables: config.datasources.max_tables,
        })
    }
}
