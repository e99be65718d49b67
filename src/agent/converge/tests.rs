//! The reconciler against a kernel in memory: a failed write at any step
//! leaves ruleset A or B in force with a kernel that queues what it needs,
//! never a mix; failures are retried with backoff; a newer ruleset
//! supersedes a pending one.

use std::time::{Duration, Instant};

use super::*;
use crate::compile::LocalNode;
use crate::config::{AgentConfig, MachineDefaults};
use crate::datapath::fake::{covers, FakeKernel};
use crate::datapath::{desired, Changes, Step};
use crate::model::Snapshot;

/// Pods `web` (10.0.0.2) and `db` (10.0.0.3) on node1, and `policies`.
fn ruleset(policies: &str) -> Ruleset {
    let inventory = "\
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: node1, containers: [{name: c}]}
status: {podIP: 10.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec: {nodeName: node1, containers: [{name: c}]}
status: {podIP: 10.0.0.3}
---
apiVersion: v1
kind: Node
metadata: {name: node1, labels: {role: cp}}
---
";
    let yaml = format!("{inventory}{policies}");
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), &yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let node = LocalNode {
        name: "node1".into(),
        ..LocalNode::default()
    };
    crate::compile::compile(&Snapshot { objects }, &node)
}

/// Egress of the Pods labelled `app` allowed to `fqdn` only, and, with
/// `node`, the Node's ingress from 10.9.0.0/16 dropped.
fn policy(app: &str, fqdn: &str, node: bool) -> String {
    let mut yaml = format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: egress-{app}}}
spec:
  priority: 1
  appliedTo: [{{podSelector: {{matchLabels: {{app: {app}}}}}}}]
  egress:
  - {{action: Allow, to: [{{fqdn: {fqdn}}}]}}
---
"
    );
    if node {
        yaml.push_str(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: node}
spec:
  priority: 2
  appliedTo: [{nodeSelector: {matchLabels: {role: cp}}}]
  ingress:
  - {action: Drop, from: [{ipBlock: {cidr: 10.9.0.0/16}}]}
---
",
        );
    }
    yaml
}

/// Ruleset A: web, `old.example`, the Node isolated. B: db,
/// `new.example`, the Node not. C: web again, `other.example`.
fn a() -> Ruleset {
    ruleset(&policy("web", "old.example", true))
}

fn b() -> Ruleset {
    ruleset(&policy("db", "new.example", false))
}

fn c() -> Ruleset {
    ruleset(&policy("web", "other.example", false))
}

fn plan(config: &AgentConfig) -> impl Fn(&Enforced, &[FqdnPattern]) -> State + '_ {
    let queues = config.queue_numbers();
    move |enforced, fqdn| desired(&config.datapath, &queues, enforced, fqdn)
}

fn config() -> AgentConfig {
    let machine = MachineDefaults {
        node_name: "node1".into(),
        queues: 2,
    };
    AgentConfig::load(&machine, None, &[]).unwrap().config
}

/// Records the handover calls.
#[derive(Default)]
struct Recorder {
    calls: Vec<String>,
}

impl Handover for Recorder {
    fn widening(&mut self, selectors: &[FqdnPattern]) {
        let names: Vec<&str> = selectors.iter().map(|p| p.as_str()).collect();
        self.calls.push(format!("widening {}", names.join(",")));
    }

    fn switched(&mut self, ruleset: &Ruleset) {
        let names: Vec<&str> = ruleset.fqdn_patterns().iter().map(|p| p.as_str()).collect();
        self.calls.push(format!("switched {}", names.join(",")));
    }
}

/// Whether the kernel queues what the ruleset in force needs.
fn kernel_covers_in_force(kernel: &FakeKernel, reconciler: &Reconciler) -> bool {
    let ruleset = reconciler.in_force().load();
    covers(&kernel.state, ruleset.enforced(), ruleset.fqdn_patterns())
}

/// Which of the given rulesets is in force, by its selectors.
fn in_force(reconciler: &Reconciler) -> String {
    let ruleset = reconciler.in_force().load();
    ruleset.fqdn_patterns()[0].as_str().to_string()
}

/// A reconciler with A in force and installed, B offered, and the kernel
/// the writes of the change from A to B will go to.
fn a_installed_b_offered(config: &AgentConfig) -> (Reconciler, FakeKernel) {
    installed_then_offered(config, a(), b())
}

/// A reconciler with `installed` in force and installed, `offered`
/// offered, and the kernel the writes of the change will go to.
fn installed_then_offered(
    config: &AgentConfig,
    installed: Ruleset,
    offered: Ruleset,
) -> (Reconciler, FakeKernel) {
    let mut reconciler = Reconciler::new(installed, Backoff::DEFAULT);
    let mut kernel = FakeKernel::default();
    let first = reconciler.converge(
        &mut kernel,
        plan(config),
        &mut Recorder::default(),
        Instant::now(),
    );
    assert!(first.changed && first.realized && first.failed.is_none());
    reconciler.offer(offered);
    (reconciler, kernel)
}

#[test]
fn the_rulesets_differ_in_every_kernel_need() {
    let (a, b) = (a(), b());
    assert!(a.enforced().node_ingress && !b.enforced().node_ingress);
    assert_ne!(a.enforced().endpoints, b.enforced().endpoints);
    assert!(!a.enforced().endpoints.is_empty() && !b.enforced().endpoints.is_empty());
    assert_ne!(a.fqdn_patterns(), b.fqdn_patterns());
}

#[test]
fn a_change_widens_switches_then_narrows() {
    let config = config();
    let (mut reconciler, mut kernel) = a_installed_b_offered(&config);
    let mut handover = Recorder::default();
    let reads = kernel.reads.get();
    let done = reconciler.converge(&mut kernel, plan(&config), &mut handover, Instant::now());
    // The kernel is not read: the widening write starts from what the
    // last attempt wrote, the narrowing one from what the widening wrote.
    assert_eq!(kernel.reads.get() - reads, 0);
    assert!(done.changed && done.switched && done.realized && !done.pending);
    assert!(done.failed.is_none());
    assert_eq!((done.generation, reconciler.generation()), (2, 2));
    assert_eq!(
        handover.calls,
        ["widening old.example,new.example", "switched new.example"]
    );
    assert_eq!(in_force(&reconciler), "new.example");
    let b = b();
    let target = plan(&config)(b.enforced(), b.fqdn_patterns());
    assert!(Changes::between(&target, &kernel.state).is_empty());
    // Idempotent: nothing more to write, nothing new to announce, and
    // nothing read (drift is the drift check's).
    let reads = kernel.reads.get();
    let writes = kernel.writes.len();
    let again = reconciler.converge(&mut kernel, plan(&config), &mut handover, Instant::now());
    assert!(!again.changed && !again.switched && !again.realized);
    assert_eq!(kernel.reads.get() - reads, 0);
    assert_eq!(kernel.writes.len(), writes);
}

/// The agent-level form of the transition proof: whichever write of a
/// change fails, the ruleset in force is A or B, the kernel queues what
/// it needs, and the retry completes the change.
#[test]
fn a_failure_at_any_write_leaves_a_or_b_in_force_never_a_mix() {
    let config = config();
    let (_, probe) = {
        let (mut reconciler, mut kernel) = a_installed_b_offered(&config);
        let before = kernel.writes.len();
        reconciler.converge(
            &mut kernel,
            plan(&config),
            &mut Recorder::default(),
            Instant::now(),
        );
        (before, kernel.writes.len() - before)
    };
    assert!(probe >= 5, "widen and narrow write several steps: {probe}");
    for step in 0..probe {
        let (mut reconciler, mut kernel) = a_installed_b_offered(&config);
        kernel.fail_at = Some(kernel.writes.len() + step);
        let now = Instant::now();
        let failed = reconciler.converge(&mut kernel, plan(&config), &mut Recorder::default(), now);
        let (error, delay) = failed.failed.as_ref().expect("the write failed");
        assert!(matches!(error, ApplyError::Write { .. }), "{error}");
        assert_eq!(*delay, Backoff::DEFAULT.initial);
        let force = in_force(&reconciler);
        assert!(force == "old.example" || force == "new.example");
        assert_eq!(failed.pending, force == "old.example", "step {step}");
        assert!(
            kernel_covers_in_force(&kernel, &reconciler),
            "step {step}: {force} in force, kernel {:?}",
            kernel.state
        );
        // What a failed write left is unknown: the retry reads it.
        let reads = kernel.reads.get();
        let retried = reconciler.converge(
            &mut kernel,
            plan(&config),
            &mut Recorder::default(),
            now + *delay,
        );
        assert!(retried.failed.is_none() && retried.realized, "step {step}");
        assert_eq!(kernel.reads.get() - reads, 1, "step {step}");
        assert_eq!(retried.recovered.map(|r| r.attempts), Some(2));
        assert_eq!(in_force(&reconciler), "new.example");
        assert_eq!(reconciler.generation(), 2);
        assert!(kernel_covers_in_force(&kernel, &reconciler));
    }
}

#[test]
fn a_failing_kernel_is_retried_with_growing_backoff() {
    let config = config();
    let mut reconciler = Reconciler::new(a(), Backoff::DEFAULT);
    let mut kernel = FakeKernel::failing_after(State::default(), 0);
    let t0 = Instant::now();
    let first = reconciler.converge(&mut kernel, plan(&config), &mut Recorder::default(), t0);
    assert_eq!(kernel.writes, [Step::PrepareSets]);
    let (_, delay) = first.failed.expect("failed");
    assert_eq!(delay, Duration::from_millis(200));
    assert!(!first.realized);
    assert_eq!(reconciler.retry_in(t0), Some(delay));
    assert_eq!(reconciler.retry_in(t0 + delay), Some(Duration::ZERO));
    // It fails again: the wait doubles.
    kernel.fail_at = Some(kernel.writes.len());
    let second = reconciler.converge(
        &mut kernel,
        plan(&config),
        &mut Recorder::default(),
        t0 + delay,
    );
    assert_eq!(second.failed.expect("failed").1, Duration::from_millis(400));
    // Then it works: recovered after three attempts, in sync, announced.
    let third = reconciler.converge(
        &mut kernel,
        plan(&config),
        &mut Recorder::default(),
        t0 + Duration::from_millis(600),
    );
    assert!(third.failed.is_none() && third.changed && third.realized);
    assert_eq!(third.recovered.map(|r| r.attempts), Some(3));
    assert_eq!(reconciler.retry_in(t0), None);
    assert!(kernel_covers_in_force(&kernel, &reconciler));
}

#[test]
fn a_newer_ruleset_supersedes_a_pending_one() {
    let config = config();
    let (mut reconciler, mut kernel) = a_installed_b_offered(&config);
    // The bridge to B fails: B stays pending, A in force.
    kernel.fail_at = Some(kernel.writes.len());
    let now = Instant::now();
    let failed = reconciler.converge(&mut kernel, plan(&config), &mut Recorder::default(), now);
    assert!(failed.failed.is_some() && failed.pending && !failed.switched);
    assert_eq!(in_force(&reconciler), "old.example");
    // C arrives before the retry: it replaces B, which never comes in force.
    reconciler.offer(c());
    let mut handover = Recorder::default();
    let done = reconciler.converge(&mut kernel, plan(&config), &mut handover, now);
    assert!(done.switched && done.failed.is_none() && !done.pending);
    assert_eq!(in_force(&reconciler), "other.example");
    assert_eq!(done.generation, 2, "one switch, from A to C");
    assert_eq!(
        handover.calls,
        [
            "widening old.example,other.example",
            "switched other.example"
        ]
    );
    let c = c();
    let target = plan(&config)(c.enforced(), c.fqdn_patterns());
    assert!(Changes::between(&target, &kernel.state).is_empty());
    assert!(!kernel.state.learned.keys().any(|name| {
        name == &crate::datapath::plan::fqdn_set(
            &FqdnPattern::new("new.example"),
            crate::datapath::Family::V4,
        )
    }));
}

/// What an earlier agent left (A installed, no agent) is adopted: B goes in
/// force at once, and whichever write of the move fails, the kernel
/// queues what A's kernel queued and what B needs, so nothing both deny
/// passes; the retry completes the move.
#[test]
fn adopting_an_earlier_agents_state_bridges_from_it() {
    let config = config();
    let (_, left) = a_installed_b_offered(&config);
    let adopted = crate::datapath::adopted(&left.state);
    assert_eq!(&adopted, a().enforced());
    let adopt = || {
        Reconciler::adopting(
            Arc::new(ArcSwap::from_pointee(c())),
            b(),
            adopted.clone(),
            Backoff::DEFAULT,
        )
    };
    let mut reconciler = adopt();
    assert_eq!(in_force(&reconciler), "new.example");
    let mut kernel = left.clone();
    let before = kernel.writes.len();
    let done = reconciler.converge(
        &mut kernel,
        plan(&config),
        &mut Recorder::default(),
        Instant::now(),
    );
    assert!(done.changed && done.realized && done.failed.is_none() && !done.switched);
    assert_eq!(done.generation, 1);
    let writes = kernel.writes.len() - before;
    assert!(writes >= 4, "bridge then narrow: {writes}");
    let b = b();
    let target = plan(&config)(b.enforced(), b.fqdn_patterns());
    assert!(Changes::between(&target, &kernel.state).is_empty());
    let a = a();
    for step in 0..writes {
        let mut reconciler = adopt();
        let mut kernel = left.clone();
        kernel.fail_at = Some(kernel.writes.len() + step);
        let failed = reconciler.converge(
            &mut kernel,
            plan(&config),
            &mut Recorder::default(),
            Instant::now(),
        );
        assert!(failed.failed.is_some(), "step {step}");
        // Widening keeps what A's kernel queued; narrowing starts from the
        // bridge, which queues what B needs.
        assert!(
            covers(&kernel.state, a.enforced(), &[])
                || covers(&kernel.state, b.enforced(), b.fqdn_patterns()),
            "step {step}: {:?}",
            kernel.state
        );
        kernel.fail_at = None;
        let retried = reconciler.converge(
            &mut kernel,
            plan(&config),
            &mut Recorder::default(),
            Instant::now(),
        );
        assert!(retried.failed.is_none() && retried.realized, "step {step}");
        assert!(
            Changes::between(&target, &kernel.state).is_empty(),
            "step {step}"
        );
    }
}

#[test]
fn drift_is_seen_once_realized_and_the_next_attempt_repairs_it() {
    let config = config();
    let mut reconciler = Reconciler::new(a(), Backoff::DEFAULT);
    let mut kernel = FakeKernel::default();
    assert!(
        reconciler.drift(&kernel, plan(&config)).unwrap().is_empty(),
        "not realized yet"
    );
    reconciler.converge(
        &mut kernel,
        plan(&config),
        &mut Recorder::default(),
        Instant::now(),
    );
    assert!(reconciler.drift(&kernel, plan(&config)).unwrap().is_empty());
    kernel.state.v4.jumps.clear();
    kernel
        .state
        .v6
        .chains
        .insert("TOLLGATE-INPUT".into(), Vec::new());
    // An attempt does not read the kernel, so it does not see the change;
    // the drift check does, and the attempt after it repairs from what
    // that read.
    let unseen = reconciler.converge(
        &mut kernel,
        plan(&config),
        &mut Recorder::default(),
        Instant::now(),
    );
    assert!(!unseen.changed);
    let drift = reconciler.drift(&kernel, plan(&config)).unwrap();
    assert_eq!(drift.v4.insert_jumps.len(), 3);
    assert!(drift.v6.write.contains_key("TOLLGATE-INPUT"));
    let repaired = reconciler.converge(
        &mut kernel,
        plan(&config),
        &mut Recorder::default(),
        Instant::now(),
    );
    assert!(
        repaired.changed && !repaired.realized,
        "same generation, repaired"
    );
    assert!(reconciler.drift(&kernel, plan(&config)).unwrap().is_empty());
}

/// A and B of two verdict cache generations (1, 2).
fn cached(ruleset: Ruleset, generation: u64) -> Ruleset {
    ruleset.with_verdict_cache(crate::ruleset::VerdictCache {
        generation,
        timeout_secs: 30,
        max_entries: 1000,
        lookup: true,
    })
}

/// The generations whose cache sets the kernel's rules answer from: the
/// sets held by the lookup sets the rules name.
fn answered_from(kernel: &FakeKernel) -> Vec<String> {
    let state = &kernel.state;
    let mut names: Vec<String> = [&state.v4, &state.v6, &state.mangle_v4, &state.mangle_v6]
        .iter()
        .flat_map(|table| table.chains.values().flatten())
        .flat_map(|rule| rule.split(' '))
        .filter(|word| word.starts_with("tollgate-vcl-"))
        .filter_map(|list| state.cache_lists.get(list))
        .flatten()
        .filter_map(|set| set.strip_prefix("tollgate-vc-"))
        .map(|rest| rest[..10].to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A change of cache generation alone (a policy edit that moves no
/// endpoint) creates the next generation's sets ahead of the bridge; the
/// bridge's set writes take the current generation's sets out of the
/// lookup sets and put the next one's in, then destroy the current
/// one's. No table is written: the rules name the lookup sets.
///
/// Mutation (tried): the lookup rules naming the generation's sets again
/// (`cached_verdict_rules` given the generation) → two table writes →
/// fails.
#[test]
fn a_change_of_cache_generation_writes_no_table() {
    let config = config();
    let (mut reconciler, mut kernel) =
        installed_then_offered(&config, cached(a(), 1), cached(a(), 2));
    let mut handover = Recorder::default();
    assert_eq!(answered_from(&kernel), ["0000000001"]);
    let before = kernel.writes.len();
    let done = reconciler.converge(&mut kernel, plan(&config), &mut handover, Instant::now());
    assert!(done.switched && done.realized && done.failed.is_none());
    let writes = &kernel.writes[before..];
    assert_eq!(
        writes,
        [Step::PrepareSets, Step::PrepareSets, Step::DestroySets],
        "the sets ahead, the lookups switched, the last generation's destroyed"
    );
    assert_eq!(answered_from(&kernel), ["0000000002"]);
    assert_eq!(kernel.state.cache.len(), 18, "generation 1's destroyed");
    assert_eq!(kernel.state.cache_lists.len(), 18);
}

/// An agent from before the lookup sets left rules that name its
/// generation's sets themselves. The next agent reads no generation from
/// them (none is answered from a lookup set), so it bridges as from an
/// unknown cache: the lookup sets are made holding the new generation's
/// sets, the rules are rewritten to name them, and the old generation's
/// sets are destroyed once no rule names them, whichever write fails
/// first.
///
/// Mutation (tried): `Changes::between` not destroying sets the desired
/// state lacks from `installed.cache` → the old generation's sets stay →
/// fails.
#[test]
fn adopting_rules_that_name_a_generations_sets_moves_them_to_lookup_sets() {
    let config = config();
    let (_, mut left) = installed_then_offered(&config, cached(a(), 1), cached(a(), 1));
    // The earlier layout: each lookup set's name in a rule replaced by
    // the set it holds, and no lookup set.
    let lists = std::mem::take(&mut left.state.cache_lists);
    for table in [
        &mut left.state.v4,
        &mut left.state.v6,
        &mut left.state.mangle_v4,
        &mut left.state.mangle_v6,
    ] {
        for rule in table.chains.values_mut().flatten() {
            for (list, held) in &lists {
                let set = held.iter().next().unwrap();
                *rule = rule.replace(&format!(" {list} "), &format!(" {set} "));
            }
        }
    }
    let named_directly = |state: &State| {
        [&state.v4, &state.v6, &state.mangle_v4, &state.mangle_v6]
            .iter()
            .flat_map(|table| table.chains.values().flatten())
            .filter(|rule| rule.contains(" tollgate-vc-0000000001-"))
            .count()
    };
    assert_eq!(named_directly(&left.state), 2 * 3 * 3, "the old layout");
    let adopted = crate::datapath::adopted(&left.state);
    assert_eq!(adopted.verdict_cache, None);
    let adopt = || {
        Reconciler::adopting(
            Arc::new(ArcSwap::from_pointee(c())),
            cached(b(), 2),
            adopted.clone(),
            Backoff::DEFAULT,
        )
    };
    let b = cached(b(), 2);
    let target = plan(&config)(b.enforced(), b.fqdn_patterns());
    let done = |kernel: &FakeKernel| {
        Changes::between(&target, &kernel.state).is_empty()
            && named_directly(&kernel.state) == 0
            && kernel
                .state
                .cache
                .keys()
                .all(|set| set.contains("-0000000002-"))
            && answered_from(kernel) == ["0000000002"]
    };
    let writes = {
        let (mut reconciler, mut kernel) = (adopt(), left.clone());
        let before = kernel.writes.len();
        let first = reconciler.converge(
            &mut kernel,
            plan(&config),
            &mut Recorder::default(),
            Instant::now(),
        );
        assert!(first.realized && first.failed.is_none());
        assert!(done(&kernel), "{:?}", kernel.state);
        kernel.writes.len() - before
    };
    for step in 0..writes {
        let (mut reconciler, mut kernel) = (adopt(), left.clone());
        kernel.fail_at = Some(kernel.writes.len() + step);
        let now = Instant::now();
        let failed = reconciler.converge(&mut kernel, plan(&config), &mut Recorder::default(), now);
        assert!(failed.failed.is_some(), "step {step}");
        kernel.fail_at = None;
        let retried =
            reconciler.converge(&mut kernel, plan(&config), &mut Recorder::default(), now);
        assert!(retried.failed.is_none() && retried.realized, "step {step}");
        assert!(done(&kernel), "step {step}: {:?}", kernel.state);
    }
}

/// Creating the next generation's sets ahead is allowed to fail: at any
/// failing write the ruleset in force is A or B, the kernel queues what it
/// needs and answers from no cache of a ruleset not in force but B (whose
/// sets hold only B's verdicts), and the change completes — a failure of
/// that first write alone does not even delay it (the sets are then made
/// when the kernel narrows).
#[test]
fn a_failing_write_of_the_next_caches_sets_defers_them_and_holds_nothing_back() {
    let config = config();
    let installed = || installed_then_offered(&config, cached(a(), 1), cached(b(), 2));
    let probe = {
        let (mut reconciler, mut kernel) = installed();
        let before = kernel.writes.len();
        reconciler.converge(
            &mut kernel,
            plan(&config),
            &mut Recorder::default(),
            Instant::now(),
        );
        kernel.writes.len() - before
    };
    for step in 0..probe {
        let (mut reconciler, mut kernel) = installed();
        kernel.fail_at = Some(kernel.writes.len() + step);
        let now = Instant::now();
        let first = reconciler.converge(&mut kernel, plan(&config), &mut Recorder::default(), now);
        assert_eq!(first.failed.is_none(), step == 0, "step {step}");
        let force = in_force(&reconciler);
        assert!(kernel_covers_in_force(&kernel, &reconciler), "step {step}");
        let answered = answered_from(&kernel);
        if force == "new.example" {
            assert!(
                !answered.contains(&"0000000001".to_string()),
                "step {step}: B in force, A's verdicts answered"
            );
        }
        if step == 0 {
            assert!(first.switched && first.realized, "not held back");
        } else {
            let (_, delay) = first.failed.as_ref().unwrap();
            let retried = reconciler.converge(
                &mut kernel,
                plan(&config),
                &mut Recorder::default(),
                now + *delay,
            );
            assert!(retried.failed.is_none() && retried.realized, "step {step}");
        }
        assert_eq!(in_force(&reconciler), "new.example");
        assert!(kernel_covers_in_force(&kernel, &reconciler));
        assert_eq!(answered_from(&kernel), ["0000000002"], "step {step}");
    }
}
