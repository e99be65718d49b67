//! `policyFiles` and `docker`: the bounds on the policy directory and the
//! Docker inventory. Keys, defaults and checks; pure.

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use crate::decode::DEFAULT_OBJECTS_PER_FILE;

/// Default [`PolicyFilesConfig::max_file_bytes`]: 4 MiB. The API server
/// refuses objects above ~1.5 MiB (etcd's request limit), so this holds the
/// largest single object with room, or thousands of ordinary policies.
pub const DEFAULT_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Default [`PolicyFilesConfig::max_total_bytes`]: 16 MiB, four full files,
/// some 40,000 ordinary policies (each file is also held to the parser's
/// budget of 250,000 YAML nodes, some 6,000 ordinary policies).
pub const DEFAULT_TOTAL_BYTES: u64 = 16 * 1024 * 1024;

/// Bounds on the files of the policy directory (`--policies`): a file or
/// directory over them is a reload error, refused before it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyFilesConfig {
    /// Largest policy file read, bytes (default 4 MiB).
    #[arg(skip)]
    pub max_file_bytes: u64,
    /// Largest size of all policy files together, bytes (default 16 MiB).
    #[arg(skip)]
    pub max_total_bytes: u64,
    /// Most objects in one policy file (default 10000).
    #[arg(skip)]
    pub max_objects_per_file: usize,
}

impl Default for PolicyFilesConfig {
    fn default() -> Self {
        PolicyFilesConfig {
            max_file_bytes: DEFAULT_FILE_BYTES,
            max_total_bytes: DEFAULT_TOTAL_BYTES,
            max_objects_per_file: DEFAULT_OBJECTS_PER_FILE,
        }
    }
}

impl PolicyFilesConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let at_least_one = |key, value| ConfigError::Bound {
            key,
            value,
            reason: "must be at least 1",
        };
        if self.max_file_bytes == 0 {
            return Err(at_least_one("policyFiles.maxFileBytes", 0));
        }
        if self.max_objects_per_file == 0 {
            return Err(at_least_one("policyFiles.maxObjectsPerFile", 0));
        }
        if self.max_total_bytes < self.max_file_bytes {
            return Err(ConfigError::Bound {
                key: "policyFiles.maxTotalBytes",
                value: self.max_total_bytes,
                reason: "must be at least policyFiles.maxFileBytes",
            });
        }
        Ok(())
    }
}

/// The Docker inventory (`docs/guide/docker.md`): with `enabled`, the
/// endpoints are the running containers the Docker Engine API lists (or
/// podman's Docker-compatible service), and policies still come from
/// `--policies`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DockerConfig {
    /// Take the endpoints from the Docker Engine API: every running
    /// container is a Pod of the local Node (needs --policies).
    #[arg(long = "docker")]
    pub enabled: bool,
    /// The Docker API socket: `unix:///var/run/docker.sock` (default) or
    /// an absolute path.
    #[arg(long = "docker-host", value_name = "unix:///PATH")]
    pub host: String,
    /// The container label whose value is its namespace (default
    /// `com.docker.compose.project`; containers without it are in
    /// `default`).
    #[arg(long = "docker-namespace-label", value_name = "LABEL")]
    pub namespace_label: String,
    /// The container label naming its ports, `name=port/PROTOCOL,...`
    /// (default `tollgate.io/ports`); without it, the image's exposed
    /// ports, named `<protocol>-<port>` (`tcp-80`).
    #[arg(skip)]
    pub ports_label: String,
}

/// Default `docker.host`.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            enabled: false,
            host: DEFAULT_DOCKER_HOST.into(),
            namespace_label: "com.docker.compose.project".into(),
            ports_label: "tollgate.io/ports".into(),
        }
    }
}

impl DockerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.socket()?;
        if self.namespace_label.trim().is_empty() {
            return Err(ConfigError::DockerLabel {
                key: "namespaceLabel",
            });
        }
        if self.ports_label.trim().is_empty() {
            return Err(ConfigError::DockerLabel { key: "portsLabel" });
        }
        Ok(())
    }

    /// The path of the API socket `host` names.
    pub fn socket(&self) -> Result<PathBuf, ConfigError> {
        let path = self.host.strip_prefix("unix://").unwrap_or(&self.host);
        if path.starts_with('/') && path.len() > 1 {
            Ok(PathBuf::from(path))
        } else {
            Err(ConfigError::DockerHost {
                host: self.host.clone(),
            })
        }
    }
}

/// Where an agent in Kubernetes mode learns its peers' addresses
/// (`docs/design/scale.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Peers {
    /// Every Pod of the cluster is watched (the default: no controller).
    #[default]
    Watch,
    /// Only this Node's Pods are watched; the members of Pod selections
    /// come from the AddressGroups a `tollgate controller` publishes.
    Controller,
}

/// The Kubernetes source (`--kubernetes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesConfig {
    /// `watch` (every Pod) or `controller` (this Node's Pods, peers from
    /// the controller's AddressGroups).
    #[arg(skip)]
    pub peers: Peers,
}
