//! L7 enforcement of `l7Protocols` rules, purely: what a connection's rules
//! require (`admission`), following each stream and deciding its requests
//! ([`inspect`], with the judged bytes pinned in `judged`), withholding the segments of an
//! incomplete head ([`defer`]), verdicts by packet id ([`gate`]), the packets
//! answering a denial ([`response`]) and how ([`DenyResponse`]), and what a
//! segment with urgent data gets ([`UrgentData`]). It never lets an
//! uninspected byte reach the server, never inspects a stream the server
//! reads differently, never buffers a body and never touches a socket.

mod admission;
pub mod defer;
mod deny;
pub mod gate;
pub mod inspect;
mod judged;
pub mod response;
mod urgent;

pub use admission::{Admission, L7Policy, Requirement};
pub use defer::Deferred;
pub use deny::{DenyResponse, UnknownDenyResponse};
pub use gate::{Gate, GateStep, Tally, MAX_DEFERRED_TOTAL};
pub use inspect::{
    Denial, DenyReason, Detail, Inspection, Inspector, L7Action, RequestRecord, CLOSE_GRACE,
    MAX_DEFERRED, STALL,
};
pub use response::{deny_packets, Injection};
pub use urgent::{UnknownUrgentData, UrgentData};

#[cfg(test)]
mod tests;
