use super::*;
use crate::config::{AgentConfig, MachineDefaults};
use crate::datapath::plan::endpoints_set;
use crate::fqdn::FqdnPattern;
use crate::ruleset::Enforced;

fn config() -> AgentConfig {
    let machine = MachineDefaults {
        node_name: "node-a".into(),
        queues: 2,
    };
    AgentConfig::load(&machine, None, &[]).unwrap().config
}

/// The plan for a whole configuration.
fn desired(config: &AgentConfig, enforced: &Enforced, fqdn: &[FqdnPattern]) -> State {
    crate::datapath::plan::desired(&config.datapath, &config.queue_numbers(), enforced, fqdn)
}

fn enforced(node_ingress: bool, endpoints: &[&str]) -> Enforced {
    Enforced {
        node_ingress,
        node_egress: false,
        endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
        verdict_cache: None,
        ..Enforced::default()
    }
}

/// An `enforced` with local endpoint ranges, the addresses known in them,
/// and published ports.
fn ranged(
    endpoints: &[&str],
    ranges: &[&str],
    known: &[&str],
    published: &[(PortProtocol, u16)],
) -> Enforced {
    Enforced {
        ranges: ranges.iter().map(|r| r.parse().unwrap()).collect(),
        known: known.iter().map(|k| k.parse().unwrap()).collect(),
        published: published.to_vec(),
        ..enforced(false, endpoints)
    }
}

/// An `enforced` with endpoints that only dry-run policies apply to.
fn dry_run(endpoints: &[&str], dry_run: &[&str]) -> Enforced {
    Enforced {
        dry_run_endpoints: dry_run.iter().map(|e| e.parse().unwrap()).collect(),
        ..enforced(false, endpoints)
    }
}

/// A ruleset's kernel-facing part.
struct Needs {
    enforced: Enforced,
    fqdn: Vec<FqdnPattern>,
}

impl Needs {
    fn plan(&self, config: &AgentConfig) -> State {
        desired(config, &self.enforced, &self.fqdn)
    }
}

/// Whether the kernel in `state` queues every new connection `needs`
/// requires ([`crate::datapath::fake::covers`]).
fn covers(state: &State, needs: &Needs) -> bool {
    crate::datapath::fake::covers(state, &needs.enforced, &needs.fqdn)
}

/// Every state the kernel can be left in when a reconcile from `installed`
/// to `target` stops after some of its steps (the failing step itself
/// leaving nothing, or for the set writes any prefix of their commands).
fn partial_states(installed: &State, target: &State) -> Vec<State> {
    let changes = Changes::between(target, installed);
    let steps = steps(&changes);
    let mut out = vec![installed.clone()];
    let mut state = installed.clone();
    for step in &steps {
        match step {
            Step::PrepareSets => {
                // The set writes stop at the first refused command: any
                // prefix of each set's creation, additions and deletions.
                let mut partial = state.clone();
                for (name, write) in &changes.sets {
                    partial.sets.entry(name.clone()).or_insert_with(|| {
                        crate::datapath::state::IpSet {
                            family: write.set.family,
                            members: Default::default(),
                        }
                    });
                    out.push(partial.clone());
                    for member in &write.add {
                        partial.sets.get_mut(name).unwrap().members.insert(*member);
                        out.push(partial.clone());
                    }
                    for member in &write.remove {
                        partial.sets.get_mut(name).unwrap().members.remove(member);
                        out.push(partial.clone());
                    }
                }
                // Then each range set, swapped in whole.
                for (name, write) in &changes.ranges {
                    partial.ranges.insert(name.clone(), write.set.clone());
                    out.push(partial.clone());
                }
                for (name, write) in &changes.sets {
                    state.sets.insert(name.clone(), write.set.clone());
                }
                for (name, write) in &changes.ranges {
                    state.ranges.insert(name.clone(), write.set.clone());
                }
                for name in changes.create_learned.keys() {
                    state
                        .learned
                        .insert(name.clone(), target.learned[name].clone());
                }
            }
            Step::Table(family) => {
                *state.table_mut(*family) = target.table(*family).clone();
                *state.raw_mut(*family) = target.raw(*family).clone();
                *state.mangle_mut(*family) = target.mangle(*family).clone();
            }
            Step::Bridge => state.bridge = target.bridge.clone(),
            Step::DestroySets => {
                for name in &changes.destroy_sets {
                    state.sets.remove(name);
                    state.learned.remove(name);
                    state.ranges.remove(name);
                }
            }
        }
        out.push(state.clone());
    }
    assert_eq!(&state, target, "all steps reach the target");
    out
}

#[test]
fn steps_create_before_tables_and_destroy_after() {
    let config = config();
    let a = Needs {
        enforced: enforced(true, &["10.0.0.5", "fd00::5"]),
        fqdn: vec![FqdnPattern::new("old.example")],
    };
    let b = Needs {
        enforced: enforced(false, &["10.0.0.6"]),
        fqdn: vec![FqdnPattern::new("new.example")],
    };
    let changes = Changes::between(&b.plan(&config), &a.plan(&config));
    let order: Vec<Step> = steps(&changes);
    assert_eq!(
        order,
        [
            Step::PrepareSets,
            Step::Table(Family::V4),
            Step::Table(Family::V6),
            Step::DestroySets
        ]
    );
    assert!(steps(&Changes::between(&a.plan(&config), &a.plan(&config))).is_empty());
    assert_eq!(Step::Table(Family::V6).to_string(), "ip6tables-restore");
}

#[test]
fn bridge_queues_the_union_and_creates_only() {
    let config = config();
    let a = Needs {
        enforced: enforced(true, &["10.0.0.5", "fd00::5"]),
        fqdn: vec![FqdnPattern::new("old.example")],
    };
    let b = Needs {
        enforced: enforced(false, &["10.0.0.6", "10.0.0.5"]),
        fqdn: vec![FqdnPattern::new("new.example")],
    };
    let bridge = bridge(
        |e, f| desired(&config, e, f),
        (&a.enforced, &a.fqdn),
        (&b.enforced, &b.fqdn),
        NextCache::Deferred,
    );
    assert!(covers(&bridge, &a) && covers(&bridge, &b));
    assert_eq!(bridge.sets[endpoints_set(Family::V4)].members.len(), 2);
    let widen = Changes::between(&bridge, &a.plan(&config));
    assert!(widen.destroy_sets.is_empty(), "widening destroys nothing");
    assert_eq!(widen.create_learned.len(), 2, "new selector, both families");
    // A bridge between equal rulesets is the ruleset itself.
    let same = super::bridge(
        |e, f| desired(&config, e, f),
        (&a.enforced, &a.fqdn),
        (&a.enforced, &a.fqdn),
        NextCache::Deferred,
    );
    assert_eq!(same, a.plan(&config));
}

/// The argument of the module documentation, checked exhaustively for a
/// change that moves every kind of kernel-facing need: every state a
/// failure can leave while widening covers A (in force), and every state a
/// failure can leave while narrowing covers B (in force by then).
#[test]
fn any_failing_step_leaves_the_ruleset_in_force_covered() {
    let config = config();
    let cases = [
        (
            Needs {
                enforced: enforced(true, &["10.0.0.5", "fd00::5"]),
                fqdn: vec![FqdnPattern::new("old.example")],
            },
            Needs {
                enforced: enforced(false, &["10.0.0.6", "fd00::6"]),
                fqdn: vec![],
            },
        ),
        (
            Needs {
                enforced: enforced(false, &[]),
                fqdn: vec![],
            },
            Needs {
                enforced: enforced(true, &["10.0.0.7"]),
                fqdn: vec![FqdnPattern::new("*.new.example")],
            },
        ),
        // A container starts (its address becomes known and enforced, its
        // published port queued) while another one's leaves, on two
        // networks, one of which is new.
        (
            Needs {
                enforced: ranged(
                    &["10.0.0.5", "fd00::5"],
                    &["10.0.0.0/24", "fd00::/64"],
                    &["10.0.0.1", "10.0.0.5", "10.0.0.9", "fd00::5"],
                    &[(PortProtocol::Tcp, 8080)],
                ),
                fqdn: vec![],
            },
            Needs {
                enforced: ranged(
                    &["10.0.0.6", "fd00::6"],
                    &["10.0.0.0/24", "10.0.1.0/24", "fd00::/64"],
                    &["10.0.0.1", "10.0.0.6", "10.0.1.6", "fd00::6"],
                    &[(PortProtocol::Udp, 5353)],
                ),
                fqdn: vec![],
            },
        ),
        // A policy is promoted (one way) or put in dry-run (the other): the
        // endpoint moves between the dry-run and the enforced sets.
        (
            Needs {
                enforced: Enforced {
                    dry_run_published: vec![(PortProtocol::Tcp, 8080)],
                    ..dry_run(&["10.0.0.6"], &["10.0.0.5", "fd00::5"])
                },
                fqdn: vec![],
            },
            Needs {
                enforced: Enforced {
                    published: vec![(PortProtocol::Tcp, 8080)],
                    ..enforced(false, &["10.0.0.5", "10.0.0.6", "fd00::5"])
                },
                fqdn: vec![],
            },
        ),
    ];
    let pairs = cases.iter().flat_map(|(x, y)| [(x, y), (y, x)]);
    let caches = [NextCache::Deferred, NextCache::Ready];
    for ((a, b), next_cache) in pairs.flat_map(|pair| caches.map(|c| (pair, c))) {
        let from = a.plan(&config);
        let bridge = bridge(
            |e, f| desired(&config, e, f),
            (&a.enforced, &a.fqdn),
            (&b.enforced, &b.fqdn),
            next_cache,
        );
        for state in partial_states(&from, &bridge) {
            assert!(covers(&state, a), "widening uncovered A: {state:?}");
        }
        for state in partial_states(&bridge, &b.plan(&config)) {
            assert!(covers(&state, b), "narrowing uncovered B: {state:?}");
        }
    }
}

/// The hazard the order removes: reconciling straight from A to B passes
/// through states that cover neither ruleset (B's sets with A's tables no
/// longer queue A's endpoint, and do not yet snoop the DNS replies B's
/// FQDN selector needs).
#[test]
fn a_direct_change_would_pass_through_uncovered_states() {
    let config = config();
    let a = Needs {
        enforced: enforced(true, &["10.0.0.5"]),
        fqdn: vec![],
    };
    let b = Needs {
        enforced: enforced(false, &["10.0.0.6"]),
        fqdn: vec![FqdnPattern::new("new.example")],
    };
    let uncovered = partial_states(&a.plan(&config), &b.plan(&config))
        .iter()
        .filter(|s| !covers(s, &a) && !covers(s, &b))
        .count();
    assert!(uncovered > 0);
}

#[test]
fn adopted_reads_what_an_installed_state_enforces() {
    let config = config();
    let mut both = enforced(true, &["10.0.0.5", "fd00::5"]);
    both.node_egress = true;
    let containers = ranged(
        &["10.0.0.5"],
        &["10.0.0.0/24", "fd00::/64"],
        &["10.0.0.1", "10.0.0.5", "fd00::5"],
        &[(PortProtocol::Tcp, 8080), (PortProtocol::Sctp, 9)],
    );
    for wanted in [
        enforced(false, &[]),
        enforced(true, &["10.0.0.5"]),
        both,
        containers,
        dry_run(&["10.0.0.5"], &["10.0.0.6", "fd00::6"]),
        Enforced {
            published: vec![(PortProtocol::Tcp, 8080)],
            dry_run_published: vec![(PortProtocol::Udp, 9090)],
            ..dry_run(&["10.0.0.5"], &["10.0.0.6"])
        },
    ] {
        let installed = desired(&config, &wanted, &[]);
        assert_eq!(adopted(&installed), wanted);
        assert!(owns_anything(&installed));
    }
    assert_eq!(adopted(&State::default()), enforced(false, &[]));
    assert!(!owns_anything(&State::default()));
    // The startup state queues INPUT whole: node ingress is adopted.
    let startup = crate::datapath::plan::startup(&config.datapath, &config.queue_numbers());
    assert_eq!(adopted(&startup), enforced(true, &[]));
}

#[test]
fn startup_state_queues_input_and_forward_without_bypass_and_leaves_output_open() {
    let mut config = config();
    config.datapath.fail_mode = crate::marks::FailMode::Open;
    let state = crate::datapath::plan::startup(&config.datapath, &config.queue_numbers());
    for family in Family::ALL {
        let chains = &state.table(family).chains;
        let deciding = [
            &chains["TOLLGATE-INPUT"],
            &state.mangle(family).chains["TOLLGATE-FORWARD"],
        ];
        for (chain, rules) in ["INPUT", "FORWARD"].iter().zip(deciding) {
            let queued: Vec<_> = rules
                .iter()
                .filter(|r| r.contains("--ctstate NEW"))
                .collect();
            assert_eq!(
                queued,
                ["-m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101"],
                "{chain}"
            );
        }
        assert!(chains["TOLLGATE-OUTPUT"]
            .iter()
            .all(|r| !r.contains("--ctstate NEW")));
        assert!(chains["TOLLGATE-INPUT"].contains(&"-i lo -j ACCEPT".to_string()));
    }
    assert!(state.sets.values().all(|s| s.members.is_empty()));
    assert!(state.ranges.is_empty(), "nothing is known yet: no ranges");
}
