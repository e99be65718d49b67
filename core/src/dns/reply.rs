//! One DNS response message, decoded with hickory-proto and reduced to what
//! FQDN learning needs, and the query a response answers ([`DnsQuery`]: its
//! id and question section, as a client sent it or a response echoes it).

use std::collections::HashMap;
use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData};

/// Longest CNAME chain followed from a question name (resolvers give up
/// long before this; BIND stops at 16).
pub const MAX_CNAME_CHAIN: usize = 16;

/// Why a message was not accepted as a reply to learn from. Small and `Copy`
/// so the packet path can count it without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("message is not valid DNS wire format")]
    Malformed,
    #[error("message is a query, not a response")]
    NotAResponse,
    #[error("response has opcode {opcode}, only QUERY is learned from")]
    UnsupportedOpcode { opcode: u8 },
    #[error("response code {rcode} is neither NOERROR nor NXDOMAIN")]
    UnusableResponseCode { rcode: u16 },
    #[error("response carries no question")]
    NoQuestion,
    #[error("message is a response, not a query")]
    NotAQuery,
}

/// One entry of a question section: a normalized name (as
/// [`DnsReply::questions`] gives it), its type and class.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Question {
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
}

/// What a client asked: the message id and the question section. A
/// response answers a query when both are equal (RFC 1035 §4.1.1: the id
/// and the question are copied into the response; names compare without
/// regard to case, so 0x20 mixed case matches).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DnsQuery {
    pub id: u16,
    pub questions: Vec<Question>,
}

/// A response reduced to its question names and answer-section records of
/// class IN (authority and additional sections are never learned from:
/// only the negative TTL of an SOA there is read, which can only delay a
/// question). Names are lower-case ASCII (IDNs stay in punycode) without
/// the trailing dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsReply {
    query: DnsQuery,
    questions: Vec<String>,
    /// The response code is NXDOMAIN.
    nxdomain: bool,
    /// RFC 2308 §5: the smaller of the TTL and the MINIMUM field of the
    /// first SOA record in the authority section.
    negative_ttl: Option<u32>,
    /// Answer-section A/AAAA records: owner, address, TTL.
    addresses: Vec<(String, IpAddr, u32)>,
    /// Answer-section CNAME records: owner → target (first one per owner).
    aliases: HashMap<String, String>,
}

/// One address and every name it was reached from: the question name first,
/// then each CNAME target along the chain, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub names: Vec<String>,
    pub address: IpAddr,
    /// TTL of the address record itself (what a client may cache the
    /// address for). RFC 2181 §8: values with the top bit set read as 0.
    pub ttl: u32,
}

/// Decodes `bytes` (one DNS message, without a TCP length prefix).
pub fn parse_reply(bytes: &[u8]) -> Result<DnsReply, DnsError> {
    let message = Message::from_vec(bytes).map_err(|_| DnsError::Malformed)?;
    let meta = &message.metadata;
    if meta.message_type != MessageType::Response {
        return Err(DnsError::NotAResponse);
    }
    if meta.op_code != OpCode::Query {
        return Err(DnsError::UnsupportedOpcode {
            opcode: u8::from(meta.op_code),
        });
    }
    if !matches!(
        meta.response_code,
        ResponseCode::NoError | ResponseCode::NXDomain
    ) {
        return Err(DnsError::UnusableResponseCode {
            rcode: u16::from(meta.response_code),
        });
    }
    if message.queries.is_empty() {
        return Err(DnsError::NoQuestion);
    }
    let query = query_of(&message);
    let questions = query.questions.iter().map(|q| q.name.clone()).collect();
    let mut addresses = Vec::new();
    let mut aliases = HashMap::new();
    for record in message
        .answers
        .iter()
        .filter(|r| r.dns_class == DNSClass::IN)
    {
        match &record.data {
            RData::A(a) => addresses.push((
                name_text(&record.name),
                IpAddr::V4(a.0),
                rfc2181_ttl(record.ttl),
            )),
            RData::AAAA(aaaa) => addresses.push((
                name_text(&record.name),
                IpAddr::V6(aaaa.0),
                rfc2181_ttl(record.ttl),
            )),
            RData::CNAME(cname) => {
                aliases
                    .entry(name_text(&record.name))
                    .or_insert_with(|| name_text(&cname.0));
            }
            _ => {}
        }
    }
    let negative_ttl = message
        .authorities
        .iter()
        .find_map(|record| match &record.data {
            RData::SOA(soa) => Some(rfc2181_ttl(record.ttl).min(rfc2181_ttl(soa.minimum))),
            _ => None,
        });
    Ok(DnsReply {
        query,
        questions,
        nxdomain: meta.response_code == ResponseCode::NXDomain,
        negative_ttl,
        addresses,
        aliases,
    })
}

/// Decodes `bytes` as a standard query (QR clear, opcode QUERY, at least
/// one question): what the client asked, to match its response against.
pub fn parse_query(bytes: &[u8]) -> Result<DnsQuery, DnsError> {
    let message = Message::from_vec(bytes).map_err(|_| DnsError::Malformed)?;
    let meta = &message.metadata;
    if meta.message_type != MessageType::Query {
        return Err(DnsError::NotAQuery);
    }
    if meta.op_code != OpCode::Query {
        return Err(DnsError::UnsupportedOpcode {
            opcode: u8::from(meta.op_code),
        });
    }
    if message.queries.is_empty() {
        return Err(DnsError::NoQuestion);
    }
    Ok(query_of(&message))
}

fn query_of(message: &Message) -> DnsQuery {
    DnsQuery {
        id: message.metadata.id,
        questions: message
            .queries
            .iter()
            .map(|q| Question {
                name: name_text(&q.name),
                qtype: u16::from(q.query_type),
                qclass: u16::from(q.query_class),
            })
            .collect(),
    }
}

impl DnsReply {
    /// The query this response says it answers (its id and question
    /// section).
    pub fn query(&self) -> &DnsQuery {
        &self.query
    }

    /// The question names, normalized.
    pub fn questions(&self) -> &[String] {
        &self.questions
    }

    /// Whether the response code is NXDOMAIN (the name does not exist).
    pub fn nxdomain(&self) -> bool {
        self.nxdomain
    }

    /// How long a resolver may cache the absence of an answer (RFC 2308):
    /// the SOA of the authority section, when there is one.
    pub fn negative_ttl(&self) -> Option<u32> {
        self.negative_ttl
    }

    /// Every A/AAAA answer reachable from a question name through at most
    /// [`MAX_CNAME_CHAIN`] CNAMEs, attributed to every name on the chain.
    /// Records whose owner is not on any chain are ignored (they may be
    /// unrelated data a hostile server slipped in). A CNAME loop ends the
    /// chain at the first repeated name. An address reached from several
    /// questions yields one resolution per question; an address repeated
    /// within a chain yields one resolution with the largest TTL.
    pub fn resolved(&self) -> Vec<Resolution> {
        let mut out: Vec<Resolution> = Vec::new();
        for question in &self.questions {
            let chain = self.chain_from(question);
            // Index into `out` of each address seen for this question.
            let mut seen: HashMap<IpAddr, usize> = HashMap::new();
            for (owner, address, ttl) in &self.addresses {
                if !chain.iter().any(|name| name == owner) {
                    continue;
                }
                if let Some(existing) = seen.get(address).and_then(|i| out.get_mut(*i)) {
                    existing.ttl = existing.ttl.max(*ttl);
                    continue;
                }
                seen.insert(*address, out.len());
                out.push(Resolution {
                    names: chain.clone(),
                    address: *address,
                    ttl: *ttl,
                });
            }
        }
        out
    }

    fn chain_from(&self, question: &str) -> Vec<String> {
        let mut chain = vec![question.to_owned()];
        while chain.len() <= MAX_CNAME_CHAIN {
            let current = chain.last().map(String::as_str).unwrap_or_default();
            match self.aliases.get(current) {
                Some(target) if !chain.contains(target) => chain.push(target.clone()),
                _ => break,
            }
        }
        chain
    }
}

/// Lower-case ASCII presentation form without the trailing dot.
fn name_text(name: &Name) -> String {
    let mut text = name.to_ascii();
    if text.ends_with('.') {
        text.pop();
    }
    text.make_ascii_lowercase();
    text
}

fn rfc2181_ttl(ttl: u32) -> u32 {
    if ttl & 0x8000_0000 != 0 {
        0
    } else {
        ttl
    }
}
