//! Leader election on one `coordination.k8s.io/v1` Lease, as client-go's
//! leader election does it: the holder renews `renewTime`; another
//! candidate takes the Lease once it has seen the same record, unchanged,
//! for `leaseDurationSeconds` on its own clock (never comparing clocks
//! with the holder); every write carries the `resourceVersion` read, so
//! of two candidates at most one succeeds. A holder that stops releases
//! the Lease (clears `holderIdentity`) so that a standby takes over at
//! once. Owns the Lease's reads and writes only; never decides what a
//! leader does.
#![allow(clippy::disallowed_methods)] // expiry is measured on this process's clock.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// The Lease's namespace and name.
pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "tollgate-controller";

/// One candidate for the Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The record last seen (its resourceVersion) and when it was first
    /// seen so.
    observed: Option<(String, Instant)>,
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            observed: None,
        }
    }

    fn spec(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Takes or renews the Lease; whether this candidate holds it now.
    /// An error (the API server unreachable) is not holding it.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.seen(&created);
                    Ok(true)
                }
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        self.seen(&lease);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.identity.as_str());
        let duration = spec
            .lease_duration_seconds
            .map_or(self.duration, |s| Duration::from_secs(s.max(1) as u64));
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|(_, since)| since.elapsed() >= duration);
        if holder.is_some() && !mine && !expired {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let acquired = if mine { spec.acquire_time } else { None };
        lease.spec = Some(self.spec(acquired, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(replaced) => {
                self.seen(&replaced);
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this candidate holds it.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Err(e) if !is_conflict(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Notes the record read or written: a new resourceVersion restarts
    /// the wait for its expiry.
    fn seen(&mut self, lease: &Lease) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(v, _)| *v != version) {
            self.observed = Some((version, Instant::now()));
        }
    }
}
