//! The cluster's writes: the first population, then churn at configured
//! rates — Pods deleted and created again (with a fresh address), fresh
//! addresses on live Pods, label changes (a Pod moves to another app),
//! status writes that change no address and no label (a restart count),
//! Nodes' status reports (the kubelet's, a heartbeat time), a Namespace
//! label no policy reads, and a local policy's peer edited back and forth. Each fresh address is tagged before it is written
//! ([`Tags::written`]) so the simulated agents' latency is measured once
//! per event. Owns the cluster's state and its pseudo-random choices.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate_fake_api::FakeApi;

use crate::agents::{Tags, WRITE_ANNOTATION};
use crate::cluster::{self, Size, APPS};

/// Writes per second of each kind.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// Pod changes (create, delete, address, label), cluster-wide.
    pub pod_changes: f64,
    /// Status writes that change no address and no label.
    pub status_writes: f64,
    /// Namespace label changes.
    pub namespace_changes: f64,
    /// Policy edits.
    pub policy_edits: f64,
    /// Node status reports, cluster-wide.
    pub node_reports: f64,
}

/// What the churn wrote.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub creates: u64,
    pub deletes: u64,
    pub addresses: u64,
    pub labels: u64,
    pub statuses: u64,
    pub namespaces: u64,
    pub policies: u64,
    pub node_reports: u64,
}

impl Counts {
    pub fn add(&mut self, other: &Counts) {
        self.creates += other.creates;
        self.deletes += other.deletes;
        self.addresses += other.addresses;
        self.labels += other.labels;
        self.statuses += other.statuses;
        self.namespaces += other.namespaces;
        self.policies += other.policies;
        self.node_reports += other.node_reports;
    }
}

struct Live {
    app: usize,
    ip: String,
    restarts: u64,
}

pub struct World {
    pub size: Size,
    pods: Vec<Option<Live>>,
    /// The deleted Pods, to create again.
    deleted: Vec<usize>,
    next_ip: u32,
    rng: u64,
    policy_flip: bool,
    env_flip: bool,
    /// Node status reports written: the next one's Node and heartbeat.
    reports: usize,
}

fn marked(mut pod: Value, write: &str) -> Value {
    pod["metadata"]["annotations"] = json!({WRITE_ANNOTATION: write});
    pod
}

impl World {
    pub fn new(size: Size) -> World {
        World {
            size,
            pods: Vec::new(),
            deleted: Vec::new(),
            next_ip: 0,
            rng: 0x2545_f491_4f6c_dd1d,
            policy_flip: false,
            env_flip: false,
            reports: 0,
        }
    }

    fn random(&mut self, below: usize) -> usize {
        // xorshift64: reproducible runs, no dependency.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % below as u64) as usize
    }

    fn fresh(&mut self, tags: &Mutex<Tags>) -> String {
        let ip = cluster::address(self.next_ip);
        self.next_ip += 1;
        tags.lock().unwrap().written(ip.clone(), Instant::now());
        ip
    }

    fn write(&self, api: &FakeApi, i: usize, how: &str) {
        let live = self.pods[i].as_ref().expect("a live Pod");
        let pod = cluster::pod(&self.size, i, live.app, &live.ip, live.restarts);
        api.apply(marked(pod, how));
    }

    /// Writes every Node, the policy side and every Pod.
    pub fn populate(&mut self, api: &FakeApi) {
        for n in 0..self.size.nodes {
            api.apply(cluster::node(n));
        }
        for object in cluster::policies(&self.size) {
            api.apply(object);
        }
        for i in 0..self.size.pods {
            let ip = cluster::address(self.next_ip);
            self.next_ip += 1;
            self.pods.push(Some(Live {
                app: self.size.app_of(i),
                ip,
                restarts: 0,
            }));
            self.write(api, i, "create");
        }
    }

    /// A live Pod, at random (bounded tries: most are live).
    fn pick(&mut self) -> Option<usize> {
        for _ in 0..64 {
            let i = self.random(self.pods.len());
            if self.pods[i].is_some() {
                return Some(i);
            }
        }
        None
    }

    /// A deleted Pod, at random, taken out of the deleted ones.
    fn pick_deleted(&mut self) -> Option<usize> {
        if self.deleted.is_empty() {
            return None;
        }
        let at = self.random(self.deleted.len());
        Some(self.deleted.swap_remove(at))
    }

    fn pod_change(&mut self, api: &FakeApi, tags: &Mutex<Tags>, counts: &mut Counts) {
        match self.random(4) {
            0 => {
                // With every Pod live, a create is an address change.
                let Some(i) = self.pick_deleted() else {
                    return self.address_change(api, tags, counts);
                };
                let ip = self.fresh(tags);
                self.pods[i] = Some(Live {
                    app: self.size.app_of(i),
                    ip,
                    restarts: 0,
                });
                self.write(api, i, "create");
                counts.creates += 1;
            }
            1 => {
                let Some(i) = self.pick() else { return };
                let live = self.pods[i].take().expect("live");
                self.deleted.push(i);
                api.delete(&cluster::pod(&self.size, i, live.app, &live.ip, 0));
                counts.deletes += 1;
            }
            2 => self.address_change(api, tags, counts),
            _ => {
                let Some(i) = self.pick() else { return };
                let app = self.random(APPS);
                self.pods[i].as_mut().expect("live").app = app;
                self.write(api, i, "label");
                counts.labels += 1;
            }
        }
    }

    fn address_change(&mut self, api: &FakeApi, tags: &Mutex<Tags>, counts: &mut Counts) {
        let Some(i) = self.pick() else { return };
        let ip = self.fresh(tags);
        self.pods[i].as_mut().expect("live").ip = ip;
        self.write(api, i, "address");
        counts.addresses += 1;
    }

    fn status_write(&mut self, api: &FakeApi, counts: &mut Counts) {
        let Some(i) = self.pick() else { return };
        self.pods[i].as_mut().expect("live").restarts += 1;
        self.write(api, i, "status");
        counts.statuses += 1;
    }

    fn namespace_change(&mut self, api: &FakeApi, counts: &mut Counts) {
        let n = self.random(self.size.namespaces());
        self.env_flip = !self.env_flip;
        api.apply(cluster::namespace(n, if self.env_flip { "b" } else { "a" }));
        counts.namespaces += 1;
    }

    /// The next Node, in turn, reports its status: nothing but the
    /// heartbeat time changed.
    fn node_report(&mut self, api: &FakeApi, counts: &mut Counts) {
        let node = self.reports % self.size.nodes;
        api.apply(cluster::node_report(
            node,
            self.reports / self.size.nodes + 1,
        ));
        self.reports += 1;
        counts.node_reports += 1;
    }

    /// The local policy of app 0 in Namespace 0 allows from app 2, then
    /// from app 1 again.
    pub fn policy_edit(&mut self, api: &FakeApi, counts: &mut Counts) {
        self.policy_flip = !self.policy_flip;
        let from = if self.policy_flip { 2 } else { 1 };
        api.apply(cluster::local_policy(0, 0, from));
        counts.policies += 1;
    }

    /// Churns for `length` at `rates`, in 10 ms steps, each doing the
    /// writes due by then; `between` runs after each step (the simulated
    /// agents subscribing again).
    pub fn churn(
        &mut self,
        api: &FakeApi,
        tags: &Mutex<Tags>,
        rates: Rates,
        length: Duration,
        mut between: impl FnMut(),
    ) -> Counts {
        let mut counts = Counts::default();
        let started = Instant::now();
        let mut done = [0u64; 5];
        while started.elapsed() < length {
            let t = started.elapsed().as_secs_f64();
            let due = |rate: f64| (t * rate) as u64;
            while done[0] < due(rates.pod_changes) {
                self.pod_change(api, tags, &mut counts);
                done[0] += 1;
            }
            while done[1] < due(rates.status_writes) {
                self.status_write(api, &mut counts);
                done[1] += 1;
            }
            while done[2] < due(rates.namespace_changes) {
                self.namespace_change(api, &mut counts);
                done[2] += 1;
            }
            while done[3] < due(rates.policy_edits) {
                self.policy_edit(api, &mut counts);
                done[3] += 1;
            }
            while done[4] < due(rates.node_reports) {
                self.node_report(api, &mut counts);
                done[4] += 1;
            }
            between();
            std::thread::sleep(Duration::from_millis(10));
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server holds exactly the Pods the world says are live, and the
    /// deleted ones are created again.
    #[test]
    fn churn_keeps_the_server_and_the_world_in_step() {
        let api = FakeApi::start("127.0.0.1:0");
        let size = Size {
            nodes: 3,
            pods: 300,
        };
        let mut world = World::new(size);
        world.populate(&api);
        let tags = Mutex::new(Tags::default());
        let rates = Rates {
            pod_changes: 2000.0,
            status_writes: 100.0,
            namespace_changes: 10.0,
            policy_edits: 10.0,
            node_reports: 10.0,
        };
        let counts = world.churn(&api, &tags, rates, Duration::from_millis(300), || {});
        assert!(counts.creates > 0 && counts.deletes > 0, "{counts:?}");
        let live = world.pods.iter().filter(|p| p.is_some()).count();
        assert_eq!(
            live as u64,
            300 + counts.creates - counts.deletes,
            "{counts:?}"
        );
        assert_eq!(api.objects(&crate::agents::pods_path()).len(), live);
        assert_eq!(world.deleted.len(), 300 - live);
    }
}
