//! Reading a configuration from its layers — the machine's defaults, the
//! file (sectioned, or the old flat layout with a warning), the section
//! flags, `--set` — each a value tree laid over the one before, then read
//! once. It never reads the file or the machine itself.

use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::{Map, Value};

use super::{
    AgentConfig, AntiSpoofingConfig, AuditConfig, ConfigError, DatapathConfig, DockerConfig,
    FqdnConfig, HealthConfig, KubernetesConfig, L7Config, MetricsConfig, NodeConfig, QueuesConfig,
    StatusConfig, VerdictCacheConfig,
};

/// Defaults that depend on the machine the agent runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineDefaults {
    pub node_name: String,
    /// Number of connection queues when `queues.count` is not set (the
    /// core count).
    pub queues: u32,
}

/// A configuration as read, with what deserves a warning.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub config: AgentConfig,
    /// Keys of the old flat layout the file used, each with its new place.
    pub deprecated: Vec<(&'static str, &'static str)>,
}

impl AgentConfig {
    /// Reads the configuration from its layers, each laid over the one
    /// before: the machine's defaults, the file (its path and text), then
    /// `settings` (the flags, then `--set`) in order. Checks each section
    /// and the settings that span sections.
    pub fn load(
        machine: &MachineDefaults,
        file: Option<(&Path, &str)>,
        settings: &[Setting],
    ) -> Result<Loaded, ConfigError> {
        let mut tree = serde_json::json!({
            "node": {"name": machine.node_name},
            "queues": {"count": machine.queues},
        });
        let mut deprecated = Vec::new();
        if let Some((path, text)) = file {
            let origin = path.display().to_string();
            let mut layer = parse_file(&origin, text)?;
            deprecated = nest_flat_keys(&mut layer)?;
            // Read alone first, so that a mistake is blamed on the file.
            read(&origin, layer.clone())?;
            merge(&mut tree, layer);
        }
        for setting in settings {
            setting.apply(&mut tree);
        }
        let mut config = read("the command line", tree.clone())?;
        config.derive_queues(|section, key| tree[section].get(key).is_some())?;
        config.validate()?;
        Ok(Loaded { config, deprecated })
    }
}

fn parse_file(origin: &str, text: &str) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
        origin: origin.into(),
        reason: e.to_string(),
    })
}

/// The configuration a value tree describes, or which key is wrong.
fn read(origin: &str, tree: Value) -> Result<AgentConfig, ConfigError> {
    serde_path_to_error::deserialize(tree).map_err(|e| ConfigError::Parse {
        origin: origin.into(),
        reason: e.to_string(),
    })
}

/// `over` laid over `base`: maps are merged key by key, anything else
/// replaces.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// One key set on the command line: `--set section.key=value` (the value
/// in YAML), or a flag a section declares.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    /// Section, key, and for a map-valued key one entry of it (which may
    /// contain dots: `node.labels.kubernetes.io/os=linux`).
    path: Vec<String>,
    value: Value,
}

impl FromStr for Setting {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = || ConfigError::Setting { setting: s.into() };
        let (key, value) = s.split_once('=').ok_or_else(error)?;
        let path: Vec<String> = key.splitn(3, '.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(error());
        }
        let value = serde_saphyr::from_str(value).map_err(|_| error())?;
        Ok(Setting { path, value })
    }
}

impl Setting {
    /// A flag's values for `key` (`section.key`): kept as written when the
    /// key holds text (a name, a path), read as YAML scalars otherwise; a
    /// list when the flag may repeat.
    fn from_flag(key: &str, values: Vec<String>, list: bool, text: bool) -> Setting {
        let scalar = |raw: String| match text {
            true => Value::String(raw),
            false => serde_saphyr::from_str(&raw).unwrap_or(Value::String(raw)),
        };
        let mut values: Vec<Value> = values.into_iter().map(scalar).collect();
        let value = match (list, values.len()) {
            (false, 1) => values.remove(0),
            _ => Value::Array(values),
        };
        Setting {
            path: key.split('.').map(str::to_string).collect(),
            value,
        }
    }

    fn apply(&self, tree: &mut Value) {
        let mut slot = tree;
        for part in &self.path {
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            slot = slot
                .as_object_mut()
                .expect("an object")
                .entry(part.clone())
                .or_insert(Value::Null);
        }
        *slot = self.value.clone();
    }
}

/// A flag a section declares, and the key it sets.
pub struct Flag {
    /// `section.key`, also the flag's id.
    pub key: String,
    /// The flag, as the section's `#[arg]` declares it, made optional.
    pub arg: clap::Arg,
}

impl Flag {
    /// The setting the flag's `values` (as given) make.
    pub fn setting(&self, values: Vec<String>) -> Setting {
        let list = matches!(self.arg.get_action(), clap::ArgAction::Append);
        let parsed = self.arg.get_value_parser().type_id();
        let text = parsed == TypeId::of::<String>() || parsed == TypeId::of::<PathBuf>();
        Setting::from_flag(&self.key, values, list, text)
    }
}

/// Every flag the sections declare (`--fail-mode` sets
/// `datapath.failMode`), in section order.
pub fn flags() -> Vec<Flag> {
    use clap::{Args, Command};
    let sections = [
        ("node", NodeConfig::augment_args(Command::new("node"))),
        ("queues", QueuesConfig::augment_args(Command::new("queues"))),
        (
            "datapath",
            DatapathConfig::augment_args(Command::new("datapath")),
        ),
        ("fqdn", FqdnConfig::augment_args(Command::new("fqdn"))),
        ("l7", L7Config::augment_args(Command::new("l7"))),
        ("audit", AuditConfig::augment_args(Command::new("audit"))),
        ("status", StatusConfig::augment_args(Command::new("status"))),
        (
            "metrics",
            MetricsConfig::augment_args(Command::new("metrics")),
        ),
        ("health", HealthConfig::augment_args(Command::new("health"))),
        ("docker", DockerConfig::augment_args(Command::new("docker"))),
        (
            "kubernetes",
            KubernetesConfig::augment_args(Command::new("kubernetes")),
        ),
        (
            "verdictCache",
            VerdictCacheConfig::augment_args(Command::new("verdictCache")),
        ),
        (
            "antiSpoofing",
            AntiSpoofingConfig::augment_args(Command::new("antiSpoofing")),
        ),
    ];
    sections
        .iter()
        .flat_map(|(section, command)| {
            command.get_arguments().map(move |arg| {
                let key = format!("{section}.{}", camel_case(arg.get_id().as_str()));
                Flag {
                    arg: arg.clone().id(key.clone()).required(false),
                    key,
                }
            })
        })
        .collect()
}

/// A field name as serde's `rename_all = "camelCase"` spells it.
pub(super) fn camel_case(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// The keys of the flat layout before sections (tollgate 0.1), each with
/// its place now. A file using them is read with a warning per key; this
/// table goes when the flat layout stops being read.
pub(super) const FLAT_KEYS: [(&str, &str); 25] = [
    ("nodeName", "node.name"),
    ("nodeLabels", "node.labels"),
    ("nodeAddresses", "node.addresses"),
    ("queues", "queues.count"),
    ("queueBase", "queues.base"),
    ("interfaces", "datapath.interfaces"),
    ("markMask", "datapath.markMask"),
    ("failMode", "datapath.failMode"),
    ("privileged", "datapath.privileged"),
    ("dnsQueue", "fqdn.dnsQueue"),
    ("dnsTrustedServers", "fqdn.trustedServers"),
    ("fqdnMinTtl", "fqdn.minTtl"),
    ("fqdnMaxAddressesPerName", "fqdn.maxAddressesPerName"),
    ("fqdnMaxAddresses", "fqdn.maxAddresses"),
    ("l7Queue", "l7.queue"),
    ("l7DenyResponse", "l7.denyResponse"),
    ("l7MaxFlows", "l7.maxFlows"),
    ("l7IdleTimeoutSeconds", "l7.idleTimeoutSeconds"),
    ("auditLog", "audit.file"),
    ("auditRate", "audit.rate"),
    ("auditBurst", "audit.burst"),
    ("auditLogMaxBytes", "audit.maxBytes"),
    ("auditLogMaxFiles", "audit.maxFiles"),
    ("statusSocket", "status.socket"),
    ("metricsAddress", "metrics.address"),
];

/// Moves the flat keys of a file into their sections; returns the keys
/// moved with their new names (`failMode`, `datapath.failMode`).
fn nest_flat_keys(tree: &mut Value) -> Result<Vec<(&'static str, &'static str)>, ConfigError> {
    let Value::Object(top) = tree else {
        return Ok(Vec::new());
    };
    let mut moved = Vec::new();
    for (flat, nested) in FLAT_KEYS {
        let (section, key) = nested.split_once('.').expect("section.key");
        // `queues` is also a section: only a number is the old key.
        if flat == section && top.get(flat).is_some_and(Value::is_object) {
            continue;
        }
        let Some(value) = top.remove(flat) else {
            continue;
        };
        let slot = top
            .entry(section)
            .or_insert_with(|| Value::Object(Map::new()));
        match slot {
            Value::Object(map) if !map.contains_key(key) => {
                map.insert(key.into(), value);
            }
            _ => return Err(ConfigError::Twice { flat, nested }),
        }
        moved.push((flat, nested));
    }
    Ok(moved)
}
