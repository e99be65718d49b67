//! L7 enforcement of `l7Protocols` rules on the wire. A connection allowed
//! subject to L7 rules is accepted at SYN and marked *L7 under
//! inspection*; its client→server segments with payload come to a
//! dedicated queue. This module decides what happens there, purely:
//! following each connection's byte stream and deciding every request on
//! it ([`inspect`], time passed in), withholding the segments of an
//! incomplete request head under a global cap ([`defer`]), turning both
//! into verdicts by packet id ([`gate`]), and building the packets that
//! answer a denied request ([`response`]). It never lets a byte it has not
//! inspected reach the server, never buffers a body, and never touches a
//! socket (the worker in [`crate::workers::l7`] does).

pub mod defer;
pub mod gate;
pub mod inspect;
pub mod response;

pub use defer::Deferred;
pub use gate::{Gate, GateStep, Tally, MAX_DEFERRED_TOTAL};
pub use inspect::{
    Admission, Denial, DenyReason, Inspection, Inspector, L7Action, L7Policy, RequestRecord,
    Requirement, CLOSE_GRACE, MAX_DEFERRED, STALL,
};
pub use response::{deny_packets, Injection};

#[cfg(test)]
mod tests;
