//! L7 enforcement of `l7Protocols` rules on the wire. A connection allowed
//! subject to L7 rules is accepted at SYN and marked *L7 under
//! inspection*; its client→server segments with payload come to a
//! dedicated queue. This module owns what happens there: reading the
//! segment ([`segment`]), following each connection's byte stream and
//! deciding every request on it ([`inspect`], pure, time passed in),
//! building the packets that answer a denied request ([`response`], pure),
//! and the thin queue loop that sends them ([`worker`]). It never lets a
//! byte it has not inspected reach the server, and never buffers a body.

mod deny;
pub mod inspect;
pub mod response;

pub use deny::{DenyResponse, UnknownDenyResponse};
pub use inspect::{
    Admission, Denial, DenyReason, Inspection, Inspector, L7Action, L7Policy, RequestRecord,
    Requirement, CLOSE_GRACE, MAX_DEFERRED, STALL,
};
pub use response::{deny_packets, Injection};

#[cfg(test)]
mod tests;
