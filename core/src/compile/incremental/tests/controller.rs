//! Controller mode against watch mode: the test plays the controller,
//! computing each selection's groups from the whole inventory, and the
//! agent's compiler, holding the local Node's Pods only, must build the
//! ruleset watch mode builds of the same objects — and none while a group
//! it uses has no slice 0.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::*;
use crate::model::{Object, PortProtocol};
use crate::ruleset::Ruleset;
use crate::selection::group::{canonical, key, AddressGroupSpec, GroupMember, GroupNamedPort};
use crate::selection::{node_member, NodeEntry, PodEntry, Selection};

/// Members a slice in these tests (the product's limit is 100): small, so
/// that selections span several slices.
const SLICE: usize = 2;

/// A world a field-selected Pod watch can mirror: every Pod scheduled
/// (unscheduled Pods have no address in a cluster), each with its own
/// address (the tie between two Pods at one address is settled by names
/// groups do not carry).
fn clustered(mut world: World) -> World {
    for (index, pod) in world.pods.iter_mut() {
        normalise(*index, pod);
    }
    world
}

fn normalise(index: usize, pod: &mut PodSpec) {
    pod.ip = index as u8;
    pod.node = pod.node.min(1);
}

/// The local Node's part of `world`: what `spec.nodeName=<node>` lists
/// of Pods and `metadata.name=<node>` of Nodes.
fn local_snapshot(world: &World) -> Snapshot {
    let mut snapshot = world.snapshot();
    snapshot.objects.retain(|o| match &*o.object {
        Object::Pod(pod) => pod.spec.node_name.as_deref() == Some(LOCAL),
        Object::Node(node) => node.metadata.name == LOCAL,
        _ => true,
    });
    snapshot
}

/// What a controller publishes for `selections` over the whole `world`:
/// each selection's members (Pods matched with the whole inventory's
/// Namespace labels, or Node objects) in slices of [`SLICE`], slice 0
/// always.
fn publish<'a>(
    world: &World,
    selections: impl IntoIterator<Item = &'a Selection>,
) -> Vec<Arc<AddressGroupSpec>> {
    let snapshot = world.snapshot();
    let mut full = Selections::new(&snapshot, &local());
    let mut out = Vec::new();
    for selection in selections {
        let nodes = snapshot
            .iter()
            .filter_map(|o| match o {
                Object::Node(node) => Some(NodeEntry::of(node)),
                _ => None,
            })
            .filter(|n| selection.matches_node(n))
            .filter_map(|n| node_member(&n));
        let mut members: Vec<GroupMember> = snapshot
            .iter()
            .filter_map(|o| match o {
                Object::Pod(pod) => Some(PodEntry::of(pod)),
                _ => None,
            })
            .filter(|p| selection.matches_pod(p, full.namespace_labels(&p.namespace)))
            .map(|p| GroupMember {
                ips: p.ips.as_slice().into(),
                named_ports: p
                    .named_ports
                    .iter()
                    .map(|(name, protocol, port)| GroupNamedPort {
                        name: name.clone(),
                        protocol: *protocol,
                        port: *port,
                    })
                    .collect(),
            })
            .chain(nodes)
            .collect();
        members.sort();
        // The controller's members are the index's, but for what the
        // local Node adds to itself (its configured labels and the
        // host's addresses), which the agent counts on its own.
        let ips: BTreeSet<IpAddr> = members.iter().flat_map(|m| m.ips.clone()).collect();
        let expected: BTreeSet<IpAddr> = full.addresses(selection).iter().collect();
        let own: BTreeSet<IpAddr> = full
            .effective_node(LOCAL)
            .filter(|n| selection.matches_node(n))
            .map(|n| n.ips.into_iter().collect())
            .unwrap_or_default();
        assert_eq!(&ips | &own, expected, "{selection:?}");
        let chunks: Vec<Vec<GroupMember>> = if members.is_empty() {
            vec![Vec::new()]
        } else {
            members.chunks(SLICE).map(<[_]>::to_vec).collect()
        };
        let others = (1..chunks.len() as u32).collect::<Vec<_>>();
        for (slice, members) in chunks.into_iter().enumerate() {
            out.push(Arc::new(AddressGroupSpec {
                selection: canonical(selection),
                slice: slice as u32,
                slices: if slice == 0 {
                    others.clone()
                } else {
                    Vec::new()
                },
                members,
            }));
        }
    }
    out
}

/// Every Pod and Node selection the watch-mode ruleset's rules use.
fn published_selections(ruleset: &Ruleset) -> BTreeSet<Selection> {
    ruleset
        .peer_sets()
        .map(|(s, _)| s)
        .filter(|s| !matches!(s, Selection::ExternalEntities { .. }))
        .cloned()
        .collect()
}

/// The ruleset as controller mode must equal it: all but the names of
/// remote Pods (groups carry none) and the named ports of addresses no
/// rule's peers hold (groups carry only members'); those are compared
/// where a rule reads them, at each peer address.
fn comparable(ruleset: &Ruleset) -> (String, BTreeMap<IpAddr, Option<u16>>) {
    let fingerprint = ruleset
        .fingerprint()
        .lines()
        .filter(|l| !l.starts_with("names ") && !l.starts_with("ports "))
        .collect::<Vec<_>>()
        .join("\n");
    let ports = ruleset
        .peer_sets()
        .flat_map(|(_, set)| set.iter())
        .map(|ip| (ip, ruleset.named_port(ip, "http", PortProtocol::Tcp)))
        .collect();
    (fingerprint, ports)
}

/// The controller-mode compiler brought to `world`, the way an agent
/// sees it: its local snapshot, then (or first, with `groups_first`) the
/// groups published for what its rules need and what watch mode uses,
/// again while it waits for some (bounded). Its newest ruleset, if any.
fn converge(
    controller: &mut Incremental,
    world: &World,
    groups_first: bool,
    handed: &mut Handed,
) -> Option<Arc<Ruleset>> {
    let watch = compile(&world.snapshot(), &local());
    let local_snapshot = Arc::new(local_snapshot(world));
    let mut newest = None;
    let mut published = published_selections(&watch);
    if groups_first {
        hand(controller, handed, publish(world, &published));
    }
    controller.update(&local_snapshot, &local());
    for _ in 0..3 {
        published.extend(controller.needed().into_values());
        hand(controller, handed, publish(world, &published));
        if let Some(ruleset) = controller.ruleset() {
            newest = Some(ruleset);
        }
        if controller.waiting().is_empty() {
            break;
        }
    }
    assert!(
        controller.waiting().is_empty(),
        "{:?}",
        controller.waiting()
    );
    newest
}

/// How the groups are handed to the compiler: whole ([`Incremental::set_groups`],
/// `None`), or by difference from those handed last
/// ([`Incremental::patch_groups`], as the agent does), by name (selection
/// and slice, as the controller names them).
type Handed = Option<BTreeMap<(String, u32), Arc<AddressGroupSpec>>>;

fn hand(controller: &mut Incremental, handed: &mut Handed, groups: Vec<Arc<AddressGroupSpec>>) {
    let Some(last) = handed else {
        controller.set_groups(&groups);
        return;
    };
    let now: BTreeMap<(String, u32), Arc<AddressGroupSpec>> = groups
        .into_iter()
        .map(|g| ((g.selection.clone(), g.slice), g))
        .collect();
    let changes = last
        .iter()
        .filter(|(name, _)| !now.contains_key(*name))
        .map(|(_, was)| (Some(was), None))
        .chain(
            now.iter()
                .filter(|(name, is)| last.get(*name) != Some(*is))
                .map(|(name, is)| (last.get(name), Some(is))),
        );
    controller.patch_groups(changes);
    *last = now;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// With the groups a controller publishes for a snapshot, the
    /// controller-mode ruleset (local Pods only, peers from the groups'
    /// slices) equals the watch-mode ruleset of the same snapshot, after
    /// any sequence of Pod, label, status-only, Namespace, Node and
    /// policy changes, groups received before or after the Pods, whole or
    /// by difference.
    ///
    /// Mutation: `Published::start` ignores the slices after slice 0
    /// (`.flat_map(|s| s.values())` → `.flat_map(|s| s.get(&0))`): a
    /// selection's members beyond its first slice go missing (tried: fails).
    #[test]
    fn controller_mode_builds_the_watch_mode_ruleset(
        start in world(),
        changes in proptest::collection::vec((change(), any::<bool>()), 1..16),
        by_difference in any::<bool>(),
    ) {
        let mut world = clustered(start);
        let mut controller = Incremental::controller(&local_snapshot(&world), &local());
        let mut handed: Handed = by_difference.then(BTreeMap::new);
        let mut current = converge(&mut controller, &world, false, &mut handed)
            .expect("the first ruleset, once its groups are in");
        prop_assert_eq!(comparable(&current), comparable(&compile(&world.snapshot(), &local())));
        for (change, groups_first) in &changes {
            let mut change = change.clone();
            if let Change::Pod(index, pod) = &mut change {
                normalise(*index, pod);
            }
            // Brings `world` along; the compiler it feeds is a scratch one.
            let mut scratch = Incremental::new(&world.snapshot(), &local());
            feed(&mut scratch, &mut world, &change);
            if let Some(next) = converge(&mut controller, &world, *groups_first, &mut handed) {
                current = next;
            }
            prop_assert_eq!(
                comparable(&current),
                comparable(&compile(&world.snapshot(), &local())),
                "after {:?}", change
            );
        }
    }
}

/// A world with a local `web` Pod that policy `web` applies to: its peers
/// are the `db` Pods (one local, three remote) and the Pods of Namespaces
/// labelled `env: prod`.
fn web_world() -> World {
    let pod = |namespace, app, node| PodSpec {
        namespace,
        app,
        tier: None,
        ip: 0,
        v6: true,
        account: false,
        node,
        port: Some(80),
    };
    let mut world = World {
        pods: BTreeMap::new(),
        namespaces: [Some(true), Some(false), None],
        roles: [true, false],
        policies: [false; POLICIES.len()],
        shared: None,
    };
    world.policies[0] = true;
    for (index, spec) in [
        pod(1, 0, 0),
        pod(1, 1, 0),
        pod(1, 1, 1),
        pod(2, 1, 1),
        pod(0, 2, 1),
    ]
    .into_iter()
    .enumerate()
    {
        world.pods.insert(index, spec);
    }
    clustered(world)
}

/// Completeness, never emptiness: while a group the rules use has no
/// slice 0 (never published, or deleted), no ruleset is built — not an
/// empty set for it (an Allow that drops its peers), not a ruleset
/// without it (a Drop lost) — and the keys awaited are named.
///
/// Mutation: `Incremental::ruleset` without the check after assembly
/// (`self.blocked = false` whatever `waiting` says): a ruleset with an
/// empty set comes out (tried: fails).
#[test]
fn a_group_without_slice_0_is_waited_for_never_read_as_empty() {
    let mut world = web_world();
    let watch = compile(&world.snapshot(), &local());
    let selections = published_selections(&watch);
    assert_eq!(selections.len(), 2, "{selections:?}");
    let keys: BTreeSet<String> = selections.iter().map(key).collect();
    let mut controller = Incremental::controller(&local_snapshot(&world), &local());
    assert!(controller.ruleset().is_none(), "nothing published yet");
    assert_eq!(controller.waiting(), keys);
    assert_eq!(
        controller.needed().into_keys().collect::<BTreeSet<_>>(),
        keys
    );

    // Every slice but the first of one group.
    let groups = publish(&world, &selections);
    let db = key(selections
        .iter()
        .find(|s| matches!(s, Selection::Pods { pods: Some(_), .. }))
        .unwrap());
    let without_db_0 = |groups: &[Arc<AddressGroupSpec>]| -> Vec<Arc<AddressGroupSpec>> {
        groups
            .iter()
            .filter(|g| !(crate::selection::group::key_of(&g.selection) == db && g.slice == 0))
            .cloned()
            .collect()
    };
    assert!(
        groups.iter().filter(|g| key_of(&g.selection) == db).count() > 1,
        "db spans slices"
    );
    controller.set_groups(&without_db_0(&groups));
    assert!(controller.ruleset().is_none());
    assert_eq!(controller.waiting(), BTreeSet::from([db.clone()]));

    // All of them: the watch-mode ruleset.
    assert_eq!(controller.set_groups(&groups), Update::Peers);
    let first = controller.ruleset().expect("complete");
    assert_eq!(comparable(&first), comparable(&watch));
    assert!(controller.waiting().is_empty());

    // Slice 0 deleted: no patch to a set without its members.
    assert_eq!(controller.set_groups(&without_db_0(&groups)), Update::Peers);
    assert!(controller.ruleset().is_none());
    assert_eq!(controller.waiting(), BTreeSet::from([db.clone()]));

    // A remote db Pod moves while it waits: still waiting; once slice 0
    // is back, the ruleset of the new members.
    let mut moved = world.pods[&2].clone();
    moved.ip = 42;
    world.pods.insert(2, moved);
    let groups = publish(&world, &selections);
    controller.set_groups(&without_db_0(&groups));
    assert!(controller.ruleset().is_none());
    controller.set_groups(&groups);
    let next = controller.ruleset().expect("complete again");
    assert_eq!(
        comparable(&next),
        comparable(&compile(&world.snapshot(), &local()))
    );
    assert_ne!(comparable(&next), comparable(&first));

    // A group no rule uses changes nothing.
    let mut unrelated = groups.clone();
    unrelated.push(Arc::new(AddressGroupSpec {
        selection: r#"{"Pods":{"namespaces":"All","pods":null}}"#.into(),
        slice: 0,
        slices: Vec::new(),
        members: vec![GroupMember {
            ips: ["10.7.7.7".parse().unwrap()].into(),
            named_ports: Box::default(),
        }],
    }));
    assert_eq!(controller.set_groups(&unrelated), Update::Unchanged);
    assert!(controller.ruleset().is_none());
}

/// A group being published (its slice 0 written, listing slice 1 that is
/// not yet) is waited for: read as complete, a Drop rule on it would miss
/// slice 1's members. A slice 0 that stops listing a slice (the controller
/// deletes it next) completes the group again.
///
/// Mutation: `Selections::waiting` reading slice 0 alone (the listing
/// ignored): a ruleset comes out without slice 1's members (tried:
/// fails).
#[test]
fn a_group_missing_a_slice_its_slice_0_lists_is_waited_for() {
    let world = web_world();
    let watch = compile(&world.snapshot(), &local());
    let selections = published_selections(&watch);
    let groups = publish(&world, &selections);
    let db = key(selections
        .iter()
        .find(|s| matches!(s, Selection::Pods { pods: Some(_), .. }))
        .unwrap());
    let first = groups
        .iter()
        .find(|g| key_of(&g.selection) == db && g.slice == 0)
        .unwrap();
    assert_eq!(first.slices, [1], "db spans two slices, slice 0 lists 1");
    let without_db_1: Vec<Arc<AddressGroupSpec>> = groups
        .iter()
        .filter(|g| !(key_of(&g.selection) == db && g.slice == 1))
        .cloned()
        .collect();
    let mut controller = Incremental::controller(&local_snapshot(&world), &local());
    controller.set_groups(&without_db_1);
    assert!(
        controller.ruleset().is_none(),
        "slice 1 is listed, not held"
    );
    assert_eq!(controller.waiting(), BTreeSet::from([db.clone()]));
    assert_eq!(controller.set_groups(&groups), Update::Peers);
    let complete = controller.ruleset().expect("complete");
    assert_eq!(comparable(&complete), comparable(&watch));

    // Slice 1 no longer listed, then gone: complete all along.
    let mut unlisted = groups.clone();
    for group in &mut unlisted {
        if key_of(&group.selection) == db && group.slice == 0 {
            Arc::make_mut(group).slices.clear();
        }
    }
    controller.set_groups(&unlisted);
    assert!(controller.waiting().is_empty());
    unlisted.retain(|g| !(key_of(&g.selection) == db && g.slice == 1));
    controller.set_groups(&unlisted);
    assert!(controller.waiting().is_empty());
    assert!(controller.ruleset().is_some(), "slice 1's members are gone");
}

/// The slices handed are held as they are, not copied: the agent's
/// source holds the same ones (at 150,000 Pods a copy was ~9 MiB of a
/// wide agent's heap). Equal slices handed anew (the source's list after
/// its watch started again) replace those held, which are let go.
///
/// Mutations: `Selections::set_slice` holding a copy
/// (`Arc::new((**spec).clone())`): each count stays 1; keeping the slice
/// held when an equal one is handed: the new ones' counts stay 1 (tried:
/// both fail).
#[test]
fn the_slices_handed_are_shared_not_copied() {
    let world = web_world();
    let selections = published_selections(&compile(&world.snapshot(), &local()));
    let groups = publish(&world, &selections);
    let mut controller = Incremental::controller(&local_snapshot(&world), &local());
    controller.set_groups(&groups);
    assert!(controller.ruleset().is_some());
    assert!(groups.iter().all(|g| Arc::strong_count(g) == 2));
    let again: Vec<Arc<AddressGroupSpec>> =
        groups.iter().map(|g| Arc::new((**g).clone())).collect();
    assert_eq!(controller.set_groups(&again), Update::Unchanged);
    assert!(groups.iter().all(|g| Arc::strong_count(g) == 1));
    assert!(again.iter().all(|g| Arc::strong_count(g) == 2));
}

use crate::selection::group::key_of;
