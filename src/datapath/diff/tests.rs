use super::*;

fn jump(chain: &str) -> (String, String) {
    ("INPUT".into(), format!("-j {chain}"))
}

#[test]
fn summary_names_every_repair() {
    let mut desired = State::default();
    desired
        .v4
        .chains
        .insert("TOLLGATE-INPUT".into(), vec!["-j ACCEPT".into()]);
    desired.v4.jumps.push(jump("TOLLGATE-INPUT"));
    desired.sets.insert(
        "tollgate-endpoints-v4".into(),
        IpSet {
            family: Family::V4,
            members: ["10.0.0.1".parse().unwrap()].into(),
        },
    );
    let mut installed = desired.clone();
    installed
        .v4
        .chains
        .insert("TOLLGATE-INPUT".into(), Vec::new());
    installed.v4.jumps.clear();
    installed
        .sets
        .get_mut("tollgate-endpoints-v4")
        .unwrap()
        .members
        .clear();
    assert_eq!(
        Changes::between(&desired, &installed).summary(),
        "iptables: chain TOLLGATE-INPUT rewritten; \
             iptables: jump `-A INPUT -j TOLLGATE-INPUT` restored; \
             ipset: tollgate-endpoints-v4 changed"
    );
    assert_eq!(Changes::between(&desired, &desired).summary(), "");
}

#[test]
fn duplicate_and_foreign_jumps_are_reconciled() {
    let desired = Table {
        chains: [("TOLLGATE-INPUT".into(), vec!["-j RETURN".into()])].into(),
        jumps: vec![jump("TOLLGATE-INPUT")],
        ..Table::default()
    };
    let installed = Table {
        chains: [
            ("TOLLGATE-INPUT".into(), vec!["-j RETURN".into()]),
            ("TOLLGATE-OLD".into(), vec![]),
        ]
        .into(),
        jumps: vec![
            jump("TOLLGATE-INPUT"),
            jump("TOLLGATE-OLD"),
            jump("TOLLGATE-INPUT"),
        ],
        ..Table::default()
    };
    let changes = TableChanges::between(&desired, &installed);
    assert_eq!(
        changes.restore_text().unwrap(),
        "*filter\n:TOLLGATE-OLD - [0:0]\n-D INPUT -j TOLLGATE-INPUT\n-D INPUT -j TOLLGATE-OLD\n\
             -X TOLLGATE-OLD\nCOMMIT\n"
    );
    let missing = Table {
        jumps: vec![],
        ..installed.clone()
    };
    let changes = TableChanges::between(&desired, &missing);
    assert_eq!(changes.insert_jumps, vec![jump("TOLLGATE-INPUT")]);
    assert_eq!(changes.remove, vec!["TOLLGATE-OLD".to_string()]);
}

/// FORWARD and DOCKER-USER as dockerd leaves them after a restart that
/// found tollgate's jumps: its own jump back at the top of FORWARD.
const DOCKER_RESTARTED: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-USER - [0:0]
:TOLLGATE-FORWARD - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j TOLLGATE-FORWARD
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A DOCKER-USER -j TOLLGATE-FORWARD
-A DOCKER-USER -j RETURN
-A TOLLGATE-FORWARD -j RETURN
COMMIT
";

fn forward_plan() -> Table {
    Table {
        chains: [("TOLLGATE-FORWARD".into(), vec!["-j RETURN".into()])].into(),
        jumps: vec![
            ("FORWARD".into(), "-j TOLLGATE-FORWARD".into()),
            (DOCKER_USER.into(), "-j TOLLGATE-FORWARD".into()),
        ],
        ..Table::default()
    }
}

#[test]
fn docker_user_jump_only_where_docker_made_the_chain() {
    let plain = Table::parse(
        "*filter\n:FORWARD ACCEPT [0:0]\n:TOLLGATE-FORWARD - [0:0]\n\
             -A FORWARD -j TOLLGATE-FORWARD\n-A TOLLGATE-FORWARD -j RETURN\nCOMMIT\n",
    );
    assert!(!plain.docker_user);
    assert!(
        TableChanges::between(&forward_plan(), &plain).is_empty(),
        "no DOCKER-USER: nothing to hook there, nothing created"
    );
    let docker = Table::parse(
        "*filter\n:FORWARD DROP [0:0]\n:DOCKER-USER - [0:0]\n:TOLLGATE-FORWARD - [0:0]\n\
             -A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -j DOCKER-USER\n\
             -A TOLLGATE-FORWARD -j RETURN\nCOMMIT\n",
    );
    assert!(docker.docker_user && docker.buried.is_empty());
    let changes = TableChanges::between(&forward_plan(), &docker);
    assert_eq!(
        changes.restore_text().unwrap(),
        "*filter\n-I DOCKER-USER 1 -j TOLLGATE-FORWARD\nCOMMIT\n",
        "inserted without declaring (flushing) Docker's chain"
    );
    // Teardown takes the jump out of DOCKER-USER and nothing else.
    let mut installed = docker.clone();
    installed
        .jumps
        .push((DOCKER_USER.into(), "-j TOLLGATE-FORWARD".into()));
    let removed = TableChanges::between(&Table::default(), &installed);
    assert_eq!(
        removed.restore_text().unwrap(),
        "*filter\n:TOLLGATE-FORWARD - [0:0]\n-D FORWARD -j TOLLGATE-FORWARD\n\
             -D DOCKER-USER -j TOLLGATE-FORWARD\n-X TOLLGATE-FORWARD\nCOMMIT\n"
    );
}

/// What the next reconcile diffs from without reading the kernel is what
/// a read after the write would find: no jump into a `DOCKER-USER` that
/// does not exist, none buried, and nothing left to write.
#[test]
fn the_state_written_is_what_a_read_would_find() {
    let desired = State {
        v4: forward_plan(),
        ..State::default()
    };
    let without_forward = State::default();
    let plain = State {
        v4: Table::parse("*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n"),
        ..State::default()
    };
    let after = written(desired.clone(), &plain);
    assert_eq!(after.v4.jumps, vec![forward_plan().jumps[0].clone()]);
    assert!(!after.v4.docker_user);
    assert!(Changes::between(&desired, &after).is_empty());
    assert_eq!(
        Changes::between(&without_forward, &after)
            .v4
            .restore_text()
            .unwrap(),
        "*filter\n:TOLLGATE-FORWARD - [0:0]\n-D FORWARD -j TOLLGATE-FORWARD\n\
             -X TOLLGATE-FORWARD\nCOMMIT\n",
        "no delete of a jump never written into a chain that does not exist"
    );
    // Docker's chain exists, and tollgate's jump was buried under it.
    let docker = State {
        v4: Table::parse(DOCKER_RESTARTED),
        ..State::default()
    };
    assert!(!docker.v4.buried.is_empty());
    let after = written(desired.clone(), &docker);
    assert_eq!(after.v4.jumps, forward_plan().jumps);
    assert!(after.v4.docker_user && after.v4.buried.is_empty());
    assert!(Changes::between(&desired, &after).is_empty());
}

#[test]
fn jump_buried_under_dockers_goes_back_to_the_top_in_one_batch() {
    let installed = Table::parse(DOCKER_RESTARTED);
    assert_eq!(
        installed.buried,
        vec![("FORWARD".to_string(), "-j TOLLGATE-FORWARD".to_string())]
    );
    let changes = TableChanges::between(&forward_plan(), &installed);
    assert_eq!(
        changes.restore_text().unwrap(),
        "*filter\n-D FORWARD -j TOLLGATE-FORWARD\n-I FORWARD 1 -j TOLLGATE-FORWARD\nCOMMIT\n"
    );
    // Once on top again, nothing changes.
    let repaired = DOCKER_RESTARTED.replace(
        "-A FORWARD -j DOCKER-USER\n-A FORWARD -j TOLLGATE-FORWARD\n",
        "-A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -j DOCKER-USER\n",
    );
    assert!(TableChanges::between(&forward_plan(), &Table::parse(&repaired)).is_empty());
    // Other foreign rules above tollgate's jump are left alone (no
    // fight with agents that keep their own jump on top).
    let foreign = |above: &str| {
        Table::parse(&format!(
            "*filter\n:FORWARD ACCEPT [0:0]\n:TOLLGATE-FORWARD - [0:0]\n\
                 {above}-A FORWARD -j TOLLGATE-FORWARD\n\
                 -A TOLLGATE-FORWARD -j RETURN\nCOMMIT\n"
        ))
    };
    let calico = foreign("-A FORWARD -m comment --comment \"cali:x\" -j cali-FORWARD\n");
    assert!(calico.buried.is_empty());
    assert!(TableChanges::between(&forward_plan(), &calico).is_empty());
    // CNI's firewall plugin (podman 4) accepts container traffic in
    // CNI-FORWARD: tollgate goes back above it.
    let cni =
        foreign("-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD\n");
    assert_eq!(cni.buried.len(), 1);
    assert_eq!(
        TableChanges::between(&forward_plan(), &cni).insert_jumps,
        vec![("FORWARD".to_string(), "-j TOLLGATE-FORWARD".to_string())]
    );
}

fn forward_jump() -> (String, String) {
    ("FORWARD".into(), "-j TOLLGATE-FORWARD".into())
}

/// FORWARD as netavark 1.4's iptables driver leaves it (podman with
/// `--network-backend netavark`, captured from `iptables-save`), with
/// tollgate's jump on top; netavark inserts its own jump at the top
/// when it is missing (its first network in the namespace, or after a
/// flush), which buries tollgate's.
const NETAVARK: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:NETAVARK_FORWARD - [0:0]
:TOLLGATE-FORWARD - [0:0]
-A FORWARD -j TOLLGATE-FORWARD
-A FORWARD -m comment --comment \"netavark firewall plugin rules\" -j NETAVARK_FORWARD
-A NETAVARK_FORWARD -d 10.88.0.0/16 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A NETAVARK_FORWARD -s 10.88.0.0/16 -j ACCEPT
-A TOLLGATE-FORWARD -j RETURN
COMMIT
";

#[test]
fn netavark_forward_layout() {
    let installed = Table::parse(NETAVARK);
    assert!(!installed.docker_user, "no DOCKER-USER on a podman host");
    assert!(installed.buried.is_empty());
    assert!(
        TableChanges::between(&forward_plan(), &installed).is_empty(),
        "on top of netavark's jump: nothing to do, DOCKER-USER not created"
    );
    let buried = NETAVARK.replace(
            "-A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -m comment --comment \"netavark firewall plugin rules\" -j NETAVARK_FORWARD\n",
            "-A FORWARD -m comment --comment \"netavark firewall plugin rules\" -j NETAVARK_FORWARD\n-A FORWARD -j TOLLGATE-FORWARD\n",
        );
    let installed = Table::parse(&buried);
    assert_eq!(installed.buried, vec![forward_jump()]);
    assert_eq!(
        TableChanges::between(&forward_plan(), &installed)
            .restore_text()
            .unwrap(),
        "*filter\n-D FORWARD -j TOLLGATE-FORWARD\n-I FORWARD 1 -j TOLLGATE-FORWARD\nCOMMIT\n",
        "moved back above NETAVARK_FORWARD in one batch, netavark's chain not declared"
    );
}

/// FORWARD as Docker 28 lays it out (moby 28's `DOCKER-FORWARD`, with
/// `DOCKER-CT` and `DOCKER-BRIDGE` under it; `DOCKER-USER` first),
/// after a dockerd restart that found tollgate's jumps: its two jumps
/// back at the top of FORWARD.
const DOCKER_28_RESTARTED: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-BRIDGE - [0:0]
:DOCKER-CT - [0:0]
:DOCKER-FORWARD - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
:TOLLGATE-FORWARD - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-FORWARD
-A FORWARD -j TOLLGATE-FORWARD
-A DOCKER ! -i docker0 -o docker0 -j DROP
-A DOCKER-BRIDGE -o docker0 -j DOCKER
-A DOCKER-CT -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A DOCKER-FORWARD -j DOCKER-CT
-A DOCKER-FORWARD -j DOCKER-ISOLATION-STAGE-1
-A DOCKER-FORWARD -j DOCKER-BRIDGE
-A DOCKER-FORWARD -i docker0 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-USER -j TOLLGATE-FORWARD
-A TOLLGATE-FORWARD -j RETURN
COMMIT
";

#[test]
fn docker_28_forward_layout() {
    let installed = Table::parse(DOCKER_28_RESTARTED);
    assert!(installed.docker_user);
    assert_eq!(
        installed.buried,
        vec![forward_jump()],
        "below DOCKER-USER and DOCKER-FORWARD"
    );
    let changes = TableChanges::between(&forward_plan(), &installed);
    assert_eq!(
        changes.restore_text().unwrap(),
        "*filter\n-D FORWARD -j TOLLGATE-FORWARD\n-I FORWARD 1 -j TOLLGATE-FORWARD\nCOMMIT\n",
        "one batch; DOCKER-USER keeps its jump, no Docker chain declared"
    );
    let repaired = DOCKER_28_RESTARTED.replace(
        "-A FORWARD -j DOCKER-USER\n-A FORWARD -j DOCKER-FORWARD\n-A FORWARD -j TOLLGATE-FORWARD\n",
        "-A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -j DOCKER-USER\n-A FORWARD -j DOCKER-FORWARD\n",
    );
    let installed = Table::parse(&repaired);
    assert!(installed.buried.is_empty());
    assert!(TableChanges::between(&forward_plan(), &installed).is_empty());
    // Only DOCKER-FORWARD above tollgate's jump (a Docker 28 host whose
    // DOCKER-USER jump was deleted by hand) buries it too.
    let only_forward = DOCKER_28_RESTARTED.replace("-A FORWARD -j DOCKER-USER\n", "");
    assert_eq!(Table::parse(&only_forward).buried, vec![forward_jump()]);
}

#[test]
fn membership_change_adds_then_deletes_the_difference_and_stale_sets_are_destroyed() {
    let set = |members: &[&str]| IpSet {
        family: Family::V4,
        members: members.iter().map(|m| m.parse().unwrap()).collect(),
    };
    let mut desired = State::default();
    desired
        .sets
        .insert("tollgate-a".into(), set(&["10.0.0.1", "10.0.0.2"]));
    desired.sets.insert("tollgate-b".into(), set(&["10.0.0.3"]));
    let mut installed = State::default();
    installed
        .sets
        .insert("tollgate-a".into(), set(&["10.0.0.1", "10.0.0.9"]));
    installed.sets.insert("tollgate-old".into(), set(&[]));
    let changes = Changes::between(&desired, &installed);
    // Only the difference, additions first: the set is never refilled.
    assert_eq!(
        changes.ipset_prepare_text().unwrap(),
        "create tollgate-a hash:ip family inet\n\
             add tollgate-a 10.0.0.2\ndel tollgate-a 10.0.0.9\n\
             create tollgate-b hash:ip family inet\nadd tollgate-b 10.0.0.3\n"
    );
    assert_eq!(
        changes.ipset_cleanup_text().unwrap(),
        "destroy tollgate-old\n"
    );
    assert!(changes.v4.restore_text().is_none());
}

#[test]
fn learned_sets_are_created_empty_kept_with_entries_and_destroyed() {
    let learned = |entries: Vec<(std::net::IpAddr, u32)>| LearnedSet {
        family: Family::V4,
        entries,
    };
    let mut desired = State::default();
    desired
        .learned
        .insert("tollgate-fqdn-a-v4".into(), learned(vec![]));
    desired
        .learned
        .insert("tollgate-fqdn-b-v4".into(), learned(vec![]));
    let mut installed = State::default();
    installed.learned.insert(
        "tollgate-fqdn-a-v4".into(),
        learned(vec![("10.0.0.1".parse().unwrap(), 30)]),
    );
    installed
        .learned
        .insert("tollgate-fqdn-old-v4".into(), learned(vec![]));
    let changes = Changes::between(&desired, &installed);
    assert_eq!(
        changes.ipset_prepare_text().unwrap(),
        "create tollgate-fqdn-b-v4 hash:ip family inet timeout 300\n"
    );
    assert_eq!(
        changes.ipset_cleanup_text().unwrap(),
        "destroy tollgate-fqdn-old-v4\n"
    );
    installed
        .learned
        .insert("tollgate-fqdn-b-v4".into(), learned(vec![]));
    installed.learned.remove("tollgate-fqdn-old-v4");
    assert!(Changes::between(&desired, &installed).is_empty());
}

/// A source set is created filled, refilled whole through a temporary set
/// and `swap` when it differs, parsed back from `ipset save` equal (hosts
/// saved without their prefix length), and destroyed when no longer
/// desired. Mutation: the entry written without `,interface` → ipset
/// refuses it, and the parsed set differs.
#[test]
fn source_sets_are_refilled_whole_and_parse_back_equal() {
    let set = SourceSet {
        family: Family::V6,
        entries: [
            ("fd01::2/128".parse().unwrap(), "veth-a".to_string()),
            ("fe80::/10".parse().unwrap(), "veth-a".to_string()),
        ]
        .into(),
    };
    let mut desired = State::default();
    desired
        .sources
        .insert("tollgate-antispoof-v6".into(), set.clone());
    let created = Changes::between(&desired, &State::default());
    assert_eq!(
        created.ipset_prepare_text().unwrap(),
        "create tollgate-antispoof-v6 hash:net,iface family inet6\n\
         add tollgate-antispoof-v6 fd01::2/128,veth-a\n\
         add tollgate-antispoof-v6 fe80::/10,veth-a\n"
    );
    // As `ipset save` lists it.
    let save = "create tollgate-antispoof-v6 hash:net,iface family inet6 hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n\
                add tollgate-antispoof-v6 fe80::/10,veth-a\n\
                add tollgate-antispoof-v6 fd01::2,veth-a\n";
    let installed = State::parse("", "", save);
    assert_eq!(installed.sources, desired.sources);
    assert!(installed.sets.is_empty(), "not read as a hash:ip set");
    assert!(Changes::between(&desired, &installed).is_empty());
    // One entry more: refilled whole.
    let mut wider = desired.clone();
    wider
        .sources
        .get_mut("tollgate-antispoof-v6")
        .unwrap()
        .entries
        .insert(("::/128".parse().unwrap(), "veth-a".into()));
    let refill = Changes::between(&wider, &installed);
    let text = refill.ipset_prepare_text().unwrap();
    assert!(
        text.contains("swap tollgate-antispoof-v6-next tollgate-antispoof-v6\n"),
        "{text}"
    );
    assert!(
        text.contains("add tollgate-antispoof-v6-next ::/128,veth-a\n"),
        "{text}"
    );
    assert_eq!(refill.summary(), "ipset: tollgate-antispoof-v6 refilled");
    // Not desired any more: destroyed.
    let gone = Changes::between(&State::default(), &installed);
    assert_eq!(gone.destroy_sets, ["tollgate-antispoof-v6"]);
}
