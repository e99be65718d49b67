//! What a denied HTTP request gets ([`DenyResponse`]): the word the
//! inspector records in a denial and the response builder acts on. A pure
//! value; it never builds packets itself.

use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// What a denied HTTP request gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DenyResponse {
    /// `HTTP/1.1 403 Forbidden` on the connection, then it is closed.
    #[default]
    Forbidden,
    /// TCP resets to both ends.
    Reset,
}

/// A deny response other than `403` or `reset`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("deny response {value:?}: expected 403 or reset")]
pub struct UnknownDenyResponse {
    pub value: String,
}

impl FromStr for DenyResponse {
    type Err = UnknownDenyResponse;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "403" => Ok(DenyResponse::Forbidden),
            "reset" => Ok(DenyResponse::Reset),
            _ => Err(UnknownDenyResponse { value: s.into() }),
        }
    }
}

/// `reset`, or `403` written as a string or a number.
impl<'de> Deserialize<'de> for DenyResponse {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Word {
            Status(u16),
            Text(String),
        }
        match Word::deserialize(deserializer)? {
            Word::Status(status) => status.to_string().parse(),
            Word::Text(text) => text.parse(),
        }
        .map_err(serde::de::Error::custom)
    }
}
