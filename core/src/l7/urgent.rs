//! What the L7 queue does with a client segment carrying TCP urgent data
//! ([`UrgentData`]): a server without `SO_OOBINLINE` takes the urgent byte
//! out of the stream it reads, so the stream tollgate inspects must never
//! hold it in-band while the server does not. A pure value; the inspector
//! acts on it.

use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// What a client segment with URG set or a non-zero urgent pointer gets
/// on an L7-inspected connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UrgentData {
    /// The connection is reset (both ends), nothing of the segment passes.
    #[default]
    Reset,
    /// URG and the urgent pointer are cleared before the segment is
    /// accepted: the server reads the byte in-band, as tollgate inspected it.
    Strip,
}

/// An urgent-data mode other than `reset` or `strip`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("urgent data mode {value:?}: expected reset or strip")]
pub struct UnknownUrgentData {
    pub value: String,
}

impl FromStr for UrgentData {
    type Err = UnknownUrgentData;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reset" => Ok(UrgentData::Reset),
            "strip" => Ok(UrgentData::Strip),
            _ => Err(UnknownUrgentData { value: s.into() }),
        }
    }
}

impl<'de> Deserialize<'de> for UrgentData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}
