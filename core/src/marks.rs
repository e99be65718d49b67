//! The packet/connection mark bits tollgate owns ([`MarkLayout`]) and what
//! happens to connections nobody can decide ([`FailMode`]): the words the
//! workers and the datapath plan share. Pure values; nothing here reads
//! configuration or touches the kernel.
//!
//! # Marks
//!
//! tollgate owns the packet/connection mark bits under the mask (default
//! `0xf00000`, bits 20–23; kube-proxy uses 0x4000 and 0x8000). The values
//! are codes under the mask, built from its three lowest bits (b0 =
//! `0x100000`, b1 = `0x200000`, b2 = `0x400000` by default; a mask needs
//! at least three bits; the others are reserved and cleared on every
//! verdict):
//!
//! | code     | default    | packet mark (from a worker, `NF_REPEAT`) | connmark |
//! |----------|------------|-------------------------------------------|----------|
//! | b0       | `0x100000` | *allow*: saved, accepted                  | decided allowed: accepted in the kernel |
//! | b1       | `0x200000` | *reject*: REJECT                          | never saved |
//! | b2       | `0x400000` | *L7*: SYN of a connection under L7 rules: saved, accepted | every TCP packet goes to the L7 queue until the worker has seen the server's SYN-ACK |
//! | b2 \| b0 | `0x500000` | *L7 active*: the worker took the SYN-ACK: saved, accepted | client→server packets with payload go to the L7 queue; the rest is accepted in the kernel |
//! | b2 \| b1 | `0x600000` | *L7 denied*: saved, dropped               | every later packet is dropped in the kernel |
//!
//! A worker answers a queued packet with such a mark and `NF_REPEAT`; the
//! chain, re-entered from the top, saves it (`CONNMARK --save-mark` with
//! nfmask and ctmask = the mask) and acts on it. Later packets of the
//! connection are handled by connmark matches before any NFQUEUE rule
//! (the rules are in `src/datapath/mod.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// Default packet-mark mask: bits 20–23, clear of kube-proxy's 0x4000
/// (masquerade) and 0x8000 (drop) and of the low byte routing daemons use.
pub const DEFAULT_MARK_MASK: u32 = 0x00f0_0000;

/// Why a mask or a fail mode was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarksError {
    #[error("mark mask {value}: {reason}")]
    Mask { value: String, reason: &'static str },
    #[error("fail mode {value:?}: expected open or closed")]
    FailMode { value: String },
}

/// What happens to new connections of enforced endpoints when the agent
/// cannot decide them (queue full, agent dead, packet unparseable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// Undecidable new connections pass (`--queue-bypass`, queue fail-open).
    Open,
    /// Undecidable new connections are dropped; privileged rules and
    /// connections already decided keep flowing.
    #[default]
    Closed,
}

impl FromStr for FailMode {
    type Err = MarksError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "open" => Ok(FailMode::Open),
            "closed" => Ok(FailMode::Closed),
            _ => Err(MarksError::FailMode { value: s.into() }),
        }
    }
}

impl fmt::Display for FailMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailMode::Open => "open",
            FailMode::Closed => "closed",
        })
    }
}

/// The packet/connection mark bits tollgate owns and the values it writes
/// into them. `allow` is the lowest set bit of the mask, `reject` the next
/// one, `l7` the third; the values are codes under the mask (see the
/// table above), and the remaining bits of the mask are reserved and
/// always cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkLayout {
    pub mask: u32,
    pub allow: u32,
    pub reject: u32,
    /// An L7 connection whose first request has not been seen yet.
    pub l7: u32,
}

impl MarkLayout {
    pub fn new(mask: u32) -> Result<MarkLayout, MarksError> {
        let lowest = |bits: u32| bits & bits.wrapping_neg();
        let allow = lowest(mask);
        let reject = lowest(mask & !allow);
        let l7 = lowest(mask & !allow & !reject);
        if allow == 0 || reject == 0 || l7 == 0 {
            return Err(MarksError::Mask {
                value: format!("{mask:#x}"),
                reason: "needs at least three bits",
            });
        }
        Ok(MarkLayout {
            mask,
            allow,
            reject,
            l7,
        })
    }

    /// An L7 connection under inspection whose stream tollgate tracks.
    pub fn l7_active(&self) -> u32 {
        self.l7 | self.allow
    }

    /// An L7 connection closed after a denied request: later packets are
    /// dropped in the kernel.
    pub fn l7_denied(&self) -> u32 {
        self.l7 | self.reject
    }

    /// `mark` with tollgate's bits replaced by `value`.
    pub fn apply(&self, mark: u32, value: u32) -> u32 {
        (mark & !self.mask) | value
    }
}

impl Default for MarkLayout {
    fn default() -> Self {
        MarkLayout::new(DEFAULT_MARK_MASK).expect("default mask has three bits")
    }
}

impl FromStr for MarkLayout {
    type Err = MarksError;
    /// A hexadecimal mask, with or without `0x`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        let mask = u32::from_str_radix(digits, 16).map_err(|_| MarksError::Mask {
            value: format!("{s:?}"),
            reason: "expected a 32-bit hexadecimal number such as 0xf00000",
        })?;
        MarkLayout::new(mask)
    }
}

/// The mask, written as a hexadecimal string (`"0xf00000"`) or a number.
impl<'de> Deserialize<'de> for MarkLayout {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Mask {
            Number(u32),
            Text(String),
        }
        match Mask::deserialize(deserializer)? {
            Mask::Number(mask) => MarkLayout::new(mask),
            Mask::Text(text) => text.parse(),
        }
        .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_mask_avoids_kube_proxy_bits() {
        assert_eq!(DEFAULT_MARK_MASK & 0xc000, 0);
    }

    #[test]
    fn mark_masks() {
        let m: MarkLayout = "0x0001C".parse().unwrap();
        assert_eq!((m.allow, m.reject, m.l7), (0x4, 0x8, 0x10));
        assert_eq!((m.l7_active(), m.l7_denied()), (0x14, 0x18));
        assert_eq!(m.apply(0xffff_ffff, m.allow), 0xffff_ffe7);
        let sparse = MarkLayout::new(0x8000_0101).unwrap();
        assert_eq!(
            (sparse.allow, sparse.reject, sparse.l7),
            (0x1, 0x100, 0x8000_0000)
        );
        assert!("0x100".parse::<MarkLayout>().is_err());
        assert!("0x300".parse::<MarkLayout>().is_err());
        assert!("zz".parse::<MarkLayout>().is_err());
        assert!(MarkLayout::new(0).is_err());
    }

    #[test]
    fn fail_mode_words() {
        assert_eq!("open".parse::<FailMode>(), Ok(FailMode::Open));
        assert_eq!(FailMode::Closed.to_string(), "closed");
        assert!("maybe".parse::<FailMode>().is_err());
    }
}
