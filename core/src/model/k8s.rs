//! Kubernetes objects tollgate reads: `networking.k8s.io/v1` NetworkPolicy
//! (strict: unknown fields are errors, like the Antrea CRDs) and the `v1`
//! inventory — Node, Namespace, Pod, Service, ServiceAccount. Inventory
//! objects keep only the fields policy needs and ignore the rest of their
//! spec/status, so `kubectl get -o yaml` dumps load as they are.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::antrea::{PortProtocol, PortValue};
use super::meta::{LabelSelector, Labels, ObjectMeta};

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sNetworkPolicy {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    /// Optional as in the API server: absent, it is the zero spec.
    #[serde(default)]
    pub spec: K8sPolicySpec,
    // Written by the implementation that enforces the policy (its
    // conditions); nothing decides by it, so it is accepted and dropped
    // as it is read, as metadata's bookkeeping is.
    #[serde(default, skip_serializing)]
    pub status: IgnoredAny,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum PolicyType {
    Ingress,
    Egress,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sPolicySpec {
    /// Absent or null, it is the empty selector: every Pod of the Namespace.
    #[serde(default)]
    pub pod_selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_types: Option<Vec<PolicyType>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<K8sIngressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<K8sEgressRule>,
}

impl K8sPolicySpec {
    /// The directions this policy isolates, with Kubernetes' defaulting:
    /// Ingress always, Egress when egress rules exist, unless `policyTypes` says.
    pub fn effective_policy_types(&self) -> Vec<PolicyType> {
        match &self.policy_types {
            Some(types) => types.clone(),
            None if self.egress.is_empty() => vec![PolicyType::Ingress],
            None => vec![PolicyType::Ingress, PolicyType::Egress],
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sIngressRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<K8sPeer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<K8sPort>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sEgressRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<K8sPeer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<K8sPort>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sPeer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_block: Option<K8sIpBlock>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sIpBlock {
    pub cidr: IpNet,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<IpNet>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sPort {
    #[serde(default)]
    pub protocol: PortProtocol,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_port: Option<i32>,
}

// ---------------------------------------------------------------- inventory

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeSpec,
    #[serde(default)]
    pub status: NodeStatus,
}

/// What of a Node's spec policy needs: the address ranges its Pods get
/// addresses from (on a Docker host, the container networks' subnets).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct NodeSpec {
    #[serde(default, rename = "podCIDR", skip_serializing_if = "Option::is_none")]
    pub pod_cidr: Option<String>,
    #[serde(default, rename = "podCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub pod_cidrs: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

impl Node {
    /// The IP addresses among `status.addresses` (InternalIP, ExternalIP).
    pub fn ips(&self) -> Vec<IpAddr> {
        self.status
            .addresses
            .iter()
            .filter_map(|a| a.address.parse().ok())
            .collect()
    }

    /// `spec.podCIDRs` (with `spec.podCIDR`), each as its network;
    /// unreadable ones and duplicates left out.
    pub fn pod_cidrs(&self) -> Vec<IpNet> {
        let mut out: Vec<IpNet> = Vec::new();
        for text in self.spec.pod_cidr.iter().chain(&self.spec.pod_cidrs) {
            if let Ok(net) = text.trim().parse::<IpNet>() {
                let net = net.trunc();
                if !out.contains(&net) {
                    out.push(net);
                }
            }
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    pub metadata: ObjectMeta,
}

impl Namespace {
    /// Labels including `kubernetes.io/metadata.name`, which the API server
    /// always sets.
    pub fn effective_labels(&self) -> Labels {
        let mut labels = self.metadata.labels.clone();
        labels.insert(
            "kubernetes.io/metadata.name".into(),
            self.metadata.name.clone(),
        );
        labels
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpec,
    #[serde(default)]
    pub status: PodStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub service_account_name: Option<String>,
    #[serde(default)]
    pub containers: Vec<Container>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default)]
    pub name: Option<String>,
    pub container_port: i32,
    #[serde(default)]
    pub protocol: PortProtocol,
    /// The Node's port this one is published on (Kubernetes `hostPort`;
    /// on a Docker host, `docker run -p HOST:CONTAINER`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    /// The Node's address it is published on; any when unset.
    #[serde(default, rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<IpAddr>,
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<PodIp>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct PodIp {
    pub ip: IpAddr,
}

impl Pod {
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// `status.podIPs`, falling back to `status.podIP`; duplicates removed.
    pub fn ips(&self) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = self.status.pod_ips.iter().map(|p| p.ip).collect();
        if let Some(ip) = self.status.pod_ip {
            if !ips.contains(&ip) {
                ips.insert(0, ip);
            }
        }
        ips
    }

    /// The ServiceAccount name, defaulting to `default` as Kubernetes does.
    pub fn service_account(&self) -> &str {
        self.spec
            .service_account_name
            .as_deref()
            .unwrap_or("default")
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ServiceSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub selector: Option<Labels>,
    #[serde(default, rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    #[serde(default, rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    #[serde(default)]
    pub ports: Vec<ServicePort>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub protocol: PortProtocol,
    pub port: i32,
    #[serde(default)]
    pub target_port: Option<PortValue>,
    #[serde(default)]
    pub node_port: Option<i32>,
}

impl Service {
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// Its backends' labels as a selector of Pods in its Namespace; none
    /// for a Service without a selector (or with an empty one: its
    /// endpoints are managed by hand).
    pub fn backends_selector(&self) -> Option<LabelSelector> {
        let selector = self.spec.selector.as_ref().filter(|s| !s.is_empty())?;
        Some(LabelSelector {
            match_labels: selector
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            match_expressions: Vec::new(),
        })
    }

    /// ClusterIPs that are addresses (`None` for headless Services is skipped).
    pub fn cluster_ips(&self) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = self
            .spec
            .cluster_ips
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect();
        if let Some(ip) = self.spec.cluster_ip.as_deref().and_then(|s| s.parse().ok()) {
            if !ips.contains(&ip) {
                ips.insert(0, ip);
            }
        }
        ips
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccount {
    pub metadata: ObjectMeta,
}
