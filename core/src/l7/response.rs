//! The packets that close a connection after a denial, built from the
//! denied segment alone: toward the client, from the server's address, a
//! `403 Forbidden` (with FIN) or a RST at the sequence number the client
//! expects next (the segment's acknowledgment number); toward the server,
//! from the client's address, a RST at the first sequence number it never
//! received (the first deferred segment's, or the denied segment's own),
//! which is exactly the one it expects next. Pure: returns IP packets for the worker's raw sockets.

use std::net::IpAddr;

use etherparse::PacketBuilder;

use super::DenyResponse;

use super::inspect::{Denial, DenyReason};
use crate::packet::segment::Segment;

const TTL: u8 = 64;

/// One packet to send, with its destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injection {
    pub destination: IpAddr,
    pub packet: Vec<u8>,
}

/// The response body: why the request was refused (never request bytes).
pub fn forbidden_body(reason: &DenyReason) -> String {
    match reason {
        DenyReason::Request { request, rule } => format!(
            "Access denied: {} request not allowed by {} rule {}\n",
            request.method.escape_default(),
            rule.policy,
            rule.name.as_deref().unwrap_or("<nil>"),
        ),
        DenyReason::Framing { why, rule, .. } => format!(
            "Access denied: {why} (by {} rule {})\n",
            rule.policy,
            rule.name.as_deref().unwrap_or("<nil>"),
        ),
        _ => "Access denied\n".to_string(),
    }
}

/// The full `403 Forbidden` response.
pub fn forbidden(reason: &DenyReason) -> Vec<u8> {
    let body = forbidden_body(reason);
    format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Packets answering `denial` of `segment`.
pub fn deny_packets(segment: &Segment<'_>, denial: &Denial) -> Vec<Injection> {
    let key = segment.key;
    let after_segment = segment.seq.wrapping_add(segment.payload.len() as u32);
    let to_client = match (&denial.response, &denial.reason) {
        (
            DenyResponse::Forbidden,
            reason @ (DenyReason::Request { .. } | DenyReason::Framing { .. }),
        ) => tcp(
            key.server.ip(),
            key.client.ip(),
            (key.server.port(), key.client.port()),
            (segment.ack, after_segment),
            Flags::PshFin,
            &forbidden(reason),
        ),
        _ => tcp(
            key.server.ip(),
            key.client.ip(),
            (key.server.port(), key.client.port()),
            (segment.ack, after_segment),
            Flags::Rst,
            &[],
        ),
    };
    let to_server = tcp(
        key.client.ip(),
        key.server.ip(),
        (key.client.port(), key.server.port()),
        (denial.unsent_from.unwrap_or(segment.seq), segment.ack),
        Flags::Rst,
        &[],
    );
    [to_client, to_server].into_iter().flatten().collect()
}

#[derive(Clone, Copy)]
enum Flags {
    PshFin,
    Rst,
}

/// An ACK-carrying TCP packet; `None` for mixed address families.
fn tcp(
    src: IpAddr,
    dst: IpAddr,
    (src_port, dst_port): (u16, u16),
    (seq, ack): (u32, u32),
    flags: Flags,
    payload: &[u8],
) -> Option<Injection> {
    let builder = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), TTL),
        (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), TTL),
        _ => return None,
    };
    let window = match flags {
        Flags::PshFin => 64_240,
        Flags::Rst => 0,
    };
    let builder = builder.tcp(src_port, dst_port, seq, window).ack(ack);
    let builder = match flags {
        Flags::PshFin => builder.psh().fin(),
        Flags::Rst => builder.rst(),
    };
    let mut packet = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut packet, payload).ok()?;
    Some(Injection {
        destination: dst,
        packet,
    })
}
