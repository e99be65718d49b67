//! The values of configuration keys that are more than a number or a
//! name: interfaces, privileged entries, labels, durations. Each reads
//! from the file's spelling and from the command line's; nothing here
//! knows which section holds it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::ConfigError;

/// An interface to enforce on, in iptables spelling (`veth+` for `veth*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface(String);

impl Interface {
    pub fn as_iptables(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Interface {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl FromStr for Interface {
    type Err = ConfigError;
    fn from_str(glob: &str) -> Result<Self, Self::Err> {
        let (stem, wildcard) = match glob.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (glob, false),
        };
        let valid_stem = !stem.is_empty()
            && stem.len() <= 15
            && stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
        if !valid_stem {
            return Err(ConfigError::Interface { glob: glob.into() });
        }
        Ok(Interface(if wildcard {
            format!("{stem}+")
        } else {
            stem.to_string()
        }))
    }
}

/// Transport of a privileged (always-allowed) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PrivilegedProtocol {
    #[serde(alias = "tcp")]
    Tcp,
    #[serde(alias = "udp")]
    Udp,
    #[serde(alias = "sctp")]
    Sctp,
    #[serde(alias = "icmp")]
    Icmp,
}

impl PrivilegedProtocol {
    fn parse(s: &str) -> Option<PrivilegedProtocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(PrivilegedProtocol::Tcp),
            "udp" => Some(PrivilegedProtocol::Udp),
            "sctp" => Some(PrivilegedProtocol::Sctp),
            "icmp" => Some(PrivilegedProtocol::Icmp),
            _ => None,
        }
    }

    /// As `--privileged` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PrivilegedProtocol::Tcp => "tcp",
            PrivilegedProtocol::Udp => "udp",
            PrivilegedProtocol::Sctp => "sctp",
            PrivilegedProtocol::Icmp => "icmp",
        }
    }

    pub fn carries_ports(self) -> bool {
        !matches!(self, PrivilegedProtocol::Icmp)
    }
}

/// A hook a privileged entry is accepted on: `input` (connections to
/// the Node), `output` (from the Node), `forward` (routed through the
/// Node: Pods, containers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrivilegedHook {
    #[serde(alias = "INPUT")]
    Input,
    #[serde(alias = "OUTPUT")]
    Output,
    #[serde(alias = "FORWARD")]
    Forward,
}

impl PrivilegedHook {
    pub fn as_str(self) -> &'static str {
        match self {
            PrivilegedHook::Input => "input",
            PrivilegedHook::Output => "output",
            PrivilegedHook::Forward => "forward",
        }
    }
}

/// The hooks of an entry that does not name them: the Node's own
/// traffic. Routed traffic is privileged only when `forward` is listed.
pub const NODE_HOOKS: [PrivilegedHook; 2] = [PrivilegedHook::Input, PrivilegedHook::Output];

fn node_hooks() -> Vec<PrivilegedHook> {
    NODE_HOOKS.to_vec()
}

/// Traffic that is always allowed, ahead of any policy, so that a deny-all
/// cannot cut the operator off, on the given destination port when one is
/// set: on `input` to the Node from `cidr`, on `output` from the Node to
/// `cidr`, on `forward` routed from or to `cidr`. `hooks` defaults to
/// the Node's own traffic ([`NODE_HOOKS`]); it is kept sorted, each hook
/// once.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Privileged {
    pub cidr: IpNet,
    #[serde(default)]
    pub protocol: Option<PrivilegedProtocol>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default = "node_hooks")]
    pub hooks: Vec<PrivilegedHook>,
}

/// An entry written as a map (`{cidr, protocol, port, hooks}`) or as text
/// (`CIDR[,proto[/port]]`, as `--privileged` takes it: the Node's own
/// traffic only).
pub(super) fn privileged<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Privileged>, D::Error> {
    use serde::de::Error;
    Vec::<Value>::deserialize(deserializer)?
        .into_iter()
        .map(|entry| match entry {
            Value::String(text) => text.parse().map_err(D::Error::custom),
            entry => {
                let mut entry: Privileged =
                    serde_json::from_value(entry).map_err(D::Error::custom)?;
                entry.hooks.sort();
                entry.hooks.dedup();
                match entry.problem() {
                    Some(reason) => Err(D::Error::custom(ConfigError::Privileged {
                        value: entry.cidr.to_string(),
                        reason,
                    })),
                    None => Ok(entry),
                }
            }
        })
        .collect()
}

impl Privileged {
    /// What is wrong with an entry whose parts each parsed.
    pub(super) fn problem(&self) -> Option<&'static str> {
        match (self.protocol, self.port) {
            (None, Some(_)) => Some("a port needs a protocol"),
            (Some(p), Some(_)) if !p.carries_ports() => Some("ICMP has no ports"),
            (_, Some(0)) => Some("port 0 is not a port"),
            _ if self.hooks.is_empty() => {
                Some("hooks must name at least one of input, output, forward")
            }
            _ => None,
        }
    }

    /// Whether the entry is accepted on `hook`.
    pub fn on(&self, hook: PrivilegedHook) -> bool {
        self.hooks.contains(&hook)
    }
}

impl std::fmt::Display for Privileged {
    /// As `--privileged` takes it, `CIDR[,proto[/port]]`, followed by
    /// ` on HOOK,...` when the hooks are not the Node's own ([`NODE_HOOKS`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.cidr)?;
        if let Some(protocol) = self.protocol {
            write!(f, ",{}", protocol.as_str())?;
            if let Some(port) = self.port {
                write!(f, "/{port}")?;
            }
        }
        if self.hooks != NODE_HOOKS {
            let hooks: Vec<&str> = self.hooks.iter().map(|h| h.as_str()).collect();
            write!(f, " on {}", hooks.join(","))?;
        }
        Ok(())
    }
}

impl FromStr for Privileged {
    type Err = ConfigError;
    /// `CIDR[,proto[/port]]`, e.g. `10.0.0.0/24,tcp/22`, for the Node's own
    /// traffic ([`NODE_HOOKS`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ConfigError::Privileged {
            value: s.into(),
            reason,
        };
        let (cidr, rest) = match s.split_once(',') {
            Some((c, r)) => (c, Some(r)),
            None => (s, None),
        };
        let cidr = parse_cidr(cidr).ok_or_else(|| err("expected CIDR[,proto[/port]]"))?;
        let (protocol, port) = match rest {
            None => (None, None),
            Some(rest) => {
                let (proto, port) = match rest.split_once('/') {
                    Some((p, port)) => (p, Some(port)),
                    None => (rest, None),
                };
                let proto = PrivilegedProtocol::parse(proto)
                    .ok_or_else(|| err("protocol must be tcp, udp, sctp or icmp"))?;
                let port = port
                    .map(|p| p.parse::<u16>().map_err(|_| err("port must be 1-65535")))
                    .transpose()?;
                (Some(proto), port)
            }
        };
        let entry = Privileged {
            cidr,
            protocol,
            port,
            hooks: node_hooks(),
        };
        match entry.problem() {
            Some(reason) => Err(err(reason)),
            None => Ok(entry),
        }
    }
}

/// Which endpoints an [`AllowedSource`] is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceEndpoint {
    /// Every endpoint (`*`).
    Any,
    /// One endpoint, `namespace/name` (a container: `project/name`).
    Named { namespace: String, name: String },
}

impl SourceEndpoint {
    /// Whether the endpoint `namespace/name` is one of these.
    pub fn covers(&self, namespace: &str, name: &str) -> bool {
        match self {
            SourceEndpoint::Any => true,
            SourceEndpoint::Named {
                namespace: ns,
                name: n,
            } => ns == namespace && n == name,
        }
    }
}

impl std::fmt::Display for SourceEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceEndpoint::Any => f.write_str("*"),
            SourceEndpoint::Named { namespace, name } => write!(f, "{namespace}/{name}"),
        }
    }
}

impl FromStr for SourceEndpoint {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "*" {
            return Ok(SourceEndpoint::Any);
        }
        match s.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(SourceEndpoint::Named {
                    namespace: namespace.into(),
                    name: name.into(),
                })
            }
            _ => Err("the endpoint must be namespace/name or *"),
        }
    }
}

/// A source address an endpoint may send from besides its own, as
/// Calico's `allowedSourcePrefixes` (a router, a VM, an address several
/// endpoints share): `cidr` for `endpoint`, or, without `cidr`, any
/// source at all (the endpoint's interface is not checked; its own
/// addresses stay its own). Written `{endpoint, cidr}` or as text
/// `NAMESPACE/NAME=CIDR`, `*=CIDR` (every endpoint) or `NAMESPACE/NAME`
/// (any source).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedSource {
    pub endpoint: SourceEndpoint,
    pub cidr: Option<IpNet>,
}

impl AllowedSource {
    fn checked(self, value: &str) -> Result<AllowedSource, ConfigError> {
        if self.endpoint == SourceEndpoint::Any && self.cidr.is_none() {
            return Err(ConfigError::AllowedSource {
                value: value.into(),
                reason: "every endpoint from any source is antiSpoofing.enabled: off",
            });
        }
        Ok(self)
    }
}

impl std::fmt::Display for AllowedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cidr {
            Some(cidr) => write!(f, "{}={cidr}", self.endpoint),
            None => write!(f, "{}", self.endpoint),
        }
    }
}

impl FromStr for AllowedSource {
    type Err = ConfigError;
    /// `NAMESPACE/NAME=CIDR`, `*=CIDR` or `NAMESPACE/NAME`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ConfigError::AllowedSource {
            value: s.into(),
            reason,
        };
        let (endpoint, cidr) = match s.split_once('=') {
            Some((endpoint, cidr)) => (
                endpoint,
                Some(parse_cidr(cidr).ok_or_else(|| err("expected a CIDR after ="))?),
            ),
            None => (s, None),
        };
        AllowedSource {
            endpoint: endpoint.trim().parse().map_err(err)?,
            cidr,
        }
        .checked(s)
    }
}

/// Entries written as maps (`{endpoint, cidr}`; `endpoint` defaults to
/// `*`) or as text ([`AllowedSource::from_str`]).
pub(super) fn allowed_sources<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<AllowedSource>, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        #[serde(default)]
        endpoint: Option<String>,
        #[serde(default)]
        cidr: Option<String>,
    }
    Vec::<Value>::deserialize(deserializer)?
        .into_iter()
        .map(|entry| match entry {
            Value::String(text) => text.parse().map_err(D::Error::custom),
            entry => {
                let Entry { endpoint, cidr } =
                    serde_json::from_value(entry).map_err(D::Error::custom)?;
                let text = match &cidr {
                    Some(cidr) => format!("{}={cidr}", endpoint.as_deref().unwrap_or("*")),
                    None => endpoint.unwrap_or_else(|| "*".into()),
                };
                text.parse().map_err(D::Error::custom)
            }
        })
        .collect()
}

/// A bare address is a host prefix.
fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
        .map(|net| net.trunc())
}

/// Labels written as a map or as `k=v,k2=v2`.
pub(super) fn labels<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    use serde::de::Error;
    match Value::deserialize(deserializer)? {
        Value::String(text) => parse_labels(&text).map_err(D::Error::custom),
        Value::Object(map) => map
            .into_iter()
            .map(|(key, value)| match value {
                Value::String(text) => Ok((key, text)),
                Value::Number(_) | Value::Bool(_) => Ok((key, value.to_string())),
                _ => Err(D::Error::custom(ConfigError::Label { value: key })),
            })
            .collect(),
        _ => Err(D::Error::custom("expected a map of labels or k=v,k2=v2")),
    }
}

pub(super) fn seconds<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_secs)
}

/// `k=v,k2=v2` as given to `--node-labels`.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    s.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ConfigError::Label { value: part.into() }),
        })
        .collect()
}
