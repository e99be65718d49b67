//! A kernel in memory, for tests that must not need root: [`FakeKernel`]
//! applies the pure diff to its own [`State`] and fails the write it is
//! told to. [`covers`] says whether a state queues what a ruleset needs.
//! Built only for tests (`cfg(test)` or the `test-util` feature).

use crate::fqdn::FqdnPattern;
use crate::ruleset::Enforced;

use super::diff::{Changes, TableChanges};
use super::kernel::Kernel;
use super::plan::{dry_run_set, endpoints_set, fqdn_set, published_port, unknown_set, Hook};
use super::state::{Family, LearnedSet, State, Table};
use super::transition::Step;
use super::DatapathError;

/// A kernel whose installed state is a value.
#[derive(Clone, Debug, Default)]
pub struct FakeKernel {
    /// What is installed.
    pub state: State,
    /// Every write asked for, failed ones included, in order.
    pub writes: Vec<Step>,
    /// The write (an index into `writes`) that fails, leaving the state
    /// as it was; `None`: every write succeeds.
    pub fail_at: Option<usize>,
    /// How many times the installed state was read.
    pub reads: std::cell::Cell<usize>,
}

impl FakeKernel {
    /// A kernel where the write after the `n` already made fails.
    pub fn failing_after(state: State, n: usize) -> FakeKernel {
        FakeKernel {
            state,
            writes: Vec::new(),
            fail_at: Some(n),
            reads: Default::default(),
        }
    }
}

impl Kernel for FakeKernel {
    fn installed(&self) -> Result<State, DatapathError> {
        self.reads.set(self.reads.get() + 1);
        Ok(self.state.clone())
    }

    fn write(&mut self, step: Step, changes: &Changes) -> Result<(), DatapathError> {
        self.writes.push(step);
        if self.fail_at == Some(self.writes.len() - 1) {
            return Err(DatapathError::Failed {
                command: format!("fake {}", step.label()),
                status: "exit status: 1".into(),
                stderr: "injected failure".into(),
                failing_input: None,
            });
        }
        apply(changes, step, &mut self.state);
        Ok(())
    }
}

/// What one step of `changes` does to `state`, as the real write would.
fn apply(changes: &Changes, step: Step, state: &mut State) {
    match step {
        Step::PrepareSets => {
            for (name, family) in &changes.create_learned {
                state
                    .learned
                    .entry(name.clone())
                    .or_insert_with(|| LearnedSet {
                        family: *family,
                        entries: Vec::new(),
                    });
            }
            for (name, write) in &changes.sets {
                state.sets.insert(name.clone(), write.set.clone());
            }
            for (name, write) in &changes.ranges {
                state.ranges.insert(name.clone(), write.set.clone());
            }
            for (name, write) in &changes.sources {
                state.sources.insert(name.clone(), write.set.clone());
            }
            for (name, set) in &changes.create_cache {
                state.cache.insert(name.clone(), set.clone());
            }
            for (name, write) in &changes.cache_lists {
                let held = state.cache_lists.entry(name.clone()).or_default();
                for set in &write.remove {
                    held.remove(set);
                }
                held.extend(write.add.iter().cloned());
            }
        }
        Step::Table(family) => {
            apply_table(changes.raw(family), state.raw_mut(family));
            apply_table(changes.mangle(family), state.mangle_mut(family));
            apply_table(changes.table(family), state.table_mut(family));
        }
        Step::Bridge => apply_table(&changes.bridge, &mut state.bridge),
        Step::DestroySets => {
            for name in &changes.destroy_sets {
                state.sets.remove(name);
                state.learned.remove(name);
                state.cache.remove(name);
                state.cache_lists.remove(name);
                state.ranges.remove(name);
                state.sources.remove(name);
            }
        }
    }
}

/// What the changes to one table do to it.
fn apply_table(changes: &TableChanges, table: &mut Table) {
    for (name, rules) in &changes.write {
        table.chains.insert(name.clone(), rules.clone());
    }
    for jump in &changes.delete_jumps {
        if let Some(i) = table.jumps.iter().position(|j| j == jump) {
            table.jumps.remove(i);
        }
        if !table.jumps.contains(jump) {
            table.buried.retain(|j| j != jump);
        }
    }
    for name in &changes.remove {
        table.chains.remove(name);
    }
    for jump in changes.insert_jumps.iter().rev() {
        table.jumps.insert(0, jump.clone());
        table.buried.retain(|j| j != jump);
    }
}

/// Whether the kernel in `state` queues every new connection a ruleset
/// with these `enforced` endpoints and `fqdn` selectors requires, for both
/// families: the endpoints are in the sets, the hooks jump to their
/// chains (FORWARD's in the mangle table), the node hook queues
/// everything when the ruleset isolates the node, the dry-run endpoints
/// are in either set, the published ports
/// are queued on INPUT, every address the ruleset calls unknown is in
/// the unknown set (closed), DNS replies are queued and the FQDN sets
/// exist when it has selectors.
pub fn covers(state: &State, enforced: &Enforced, fqdn: &[FqdnPattern]) -> bool {
    Family::ALL.iter().all(|&family| {
        let table = state.table(family);
        let set = state.sets.get(endpoints_set(family));
        let endpoints_queued = enforced
            .endpoints
            .iter()
            .filter(|a| Family::of(a) == family)
            .all(|a| set.is_some_and(|s| s.members.contains(a)));
        // A dry-run endpoint is sent to a worker from either set.
        let dry_run = state.sets.get(dry_run_set(family));
        let dry_run_queued = enforced
            .dry_run_endpoints
            .iter()
            .filter(|a| Family::of(a) == family)
            .all(|a| {
                [set, dry_run]
                    .iter()
                    .flatten()
                    .any(|s| s.members.contains(a))
            });
        let input = table
            .chains
            .get(Hook::Input.chain())
            .cloned()
            .unwrap_or_default();
        let whole_input = input
            .iter()
            .any(|r| r.starts_with("-m conntrack --ctstate NEW -j NFQUEUE"));
        let dns = input.iter().any(|r| r.contains("--sport 53"));
        let fqdn_sets = fqdn
            .iter()
            .all(|p| state.learned.contains_key(&fqdn_set(p, family)));
        let jumps = [Hook::Input, Hook::Output].iter().all(|hook| {
            table
                .jumps
                .contains(&(hook.builtin().into(), format!("-j {}", hook.chain())))
        }) && state
            .mangle(family)
            .jumps
            .contains(&("FORWARD".into(), format!("-j {}", Hook::Forward.chain())));
        let published = enforced
            .published
            .iter()
            .chain(&enforced.dry_run_published)
            .all(|port| input.iter().any(|r| published_port(r) == Some(*port)));
        let ranges: Vec<_> = enforced
            .ranges
            .iter()
            .filter(|r| Family::of(&r.addr()) == family)
            .collect();
        let unknown_closed = ranges.is_empty()
            || state.ranges.get(&unknown_set(family)).is_some_and(|set| {
                ranges.iter().all(|r| set.ranges.contains(r))
                    && set.except.iter().all(|ip| !enforced.is_unknown(*ip))
            });
        jumps
            && endpoints_queued
            && dry_run_queued
            && (enforced.node_ingress || published)
            && unknown_closed
            && (!enforced.node_ingress || whole_input)
            && (fqdn.is_empty() || (dns && fqdn_sets))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgentConfig, MachineDefaults};
    use crate::datapath::kernel::{reconcile, teardown};
    use crate::datapath::plan::desired;

    #[test]
    fn the_fake_reaches_the_plan_once_and_fails_whole() {
        let machine = MachineDefaults {
            node_name: "n".into(),
            queues: 2,
        };
        let config = AgentConfig::load(&machine, None, &[]).unwrap().config;
        let enforced = Enforced {
            node_ingress: true,
            node_egress: false,
            endpoints: vec!["10.0.0.5".parse().unwrap()],
            verdict_cache: None,
            ..Enforced::default()
        };
        let fqdn = [FqdnPattern::new("a.example")];
        let plan = desired(&config.datapath, &config.queue_numbers(), &enforced, &fqdn);
        let mut kernel = FakeKernel::failing_after(State::default(), 1);
        let error = reconcile(&mut kernel, &plan).unwrap_err();
        assert_eq!(error.label(), "iptables", "the second write fails");
        assert!(
            kernel.state.table(Family::V4).chains.is_empty(),
            "nothing of it"
        );
        assert!(reconcile(&mut kernel, &plan).unwrap());
        assert!(Changes::between(&plan, &kernel.state).is_empty());
        assert!(covers(&kernel.state, &enforced, &fqdn));
        assert!(!reconcile(&mut kernel, &plan).unwrap(), "idempotent");
        let removed = teardown(&mut kernel).unwrap();
        assert_eq!(removed.destroy_sets.len(), 4, "endpoint and learned sets");
        assert_eq!(kernel.state, State::default(), "nothing owned is left");
        assert!(teardown(&mut kernel).unwrap().is_empty(), "idempotent");
    }
}
