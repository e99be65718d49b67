//! DNS answers as the FQDN learner needs them: [`parse_reply`] turns one
//! wire-format response into the question names, A/AAAA answers and CNAMEs
//! (and [`parse_query`] a query into the [`DnsQuery`] a response must echo),
//! and [`DnsReply::resolved`] follows CNAME chains from the question so each
//! address is attributed to every name that leads to it;
//! [`TcpStreamReassembler`] frames DNS-over-TCP messages out of segments.
//! Pure and panic-free on hostile bytes: no sockets, no clock, no ipsets.

mod reply;
mod tcp;

pub use reply::{
    parse_query, parse_reply, DnsError, DnsQuery, DnsReply, Question, Resolution, MAX_CNAME_CHAIN,
};
pub use tcp::{Framed, FramingError, TcpStreamReassembler, DEFAULT_MAX_MESSAGE};

#[cfg(test)]
mod tests;
