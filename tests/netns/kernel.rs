//! The datapath library (`tollgate::datapath::Kernel`) against the kernel,
//! without the agent: rules exactly as `iptables-save` prints them,
//! idempotent installs, reconciling what a crash left, and a teardown that
//! removes what tollgate owns and nothing else.

use crate::harness::Lab;
use tollgate::config::{AgentConfig, MachineDefaults, Setting};
use tollgate::datapath::{desired, reconcile, teardown, Changes, Iptables, Kernel};
use tollgate::ruleset::Enforced;

fn enforced(node_ingress: bool, endpoints: &[&str]) -> Enforced {
    Enforced {
        node_ingress,
        node_egress: false,
        endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
        verdict_cache: None,
        ..Enforced::default()
    }
}

#[test]
fn install_is_idempotent_and_teardown_leaves_foreign_rules() {
    let Some(lab) = Lab::builder("install_is_idempotent_and_teardown_leaves_foreign_rules").build()
    else {
        return;
    };
    let ns = lab.node();
    // The kernel calls below run on a thread inside the namespace.
    ns.enter(|| {
        let defaults = MachineDefaults {
            node_name: "n".into(),
            queues: 2,
        };
        let settings = [
            "datapath.interfaces=['veth*']",
            "datapath.privileged=['10.9.0.0/16,tcp/22', 'fd00:9::/64,icmp', '10.8.0.1,udp']",
            "datapath.failMode=open",
        ]
        .map(|s| s.parse::<Setting>().unwrap());
        let config = AgentConfig::load(&defaults, None, &settings)
            .unwrap()
            .config;
        let queues = config.queue_numbers();
        ns.ok(
            "iptables -A INPUT -s 192.0.2.1 -j DROP && ip6tables -A OUTPUT -d 2001:db8::1 -j DROP \
               && ipset create foreign hash:ip",
        );
        let mut kernel = Iptables::detect().unwrap();
        let plan = desired(
            &config.datapath,
            &queues,
            &enforced(true, &["10.0.0.5", "fd00::5"]),
            &[],
        );
        assert!(
            reconcile(&mut kernel, &plan).unwrap(),
            "first install changes"
        );
        let after = kernel.installed().unwrap();
        let diff = Changes::between(&plan, &after);
        assert!(
            diff.is_empty(),
            "iptables-save differs from the plan: {diff:#?}"
        );
        assert!(
            !reconcile(&mut kernel, &plan).unwrap(),
            "second install is a no-op"
        );
        let save = ns.ok("iptables-save -t filter");
        assert!(
            save.contains("-A INPUT -j TOLLGATE-INPUT\n-A INPUT -s 192.0.2.1/32 -j DROP"),
            "{save}"
        );

        // Membership change: the set is swapped, the rules stay.
        let grown = desired(
            &config.datapath,
            &queues,
            &enforced(true, &["10.0.0.5", "10.0.0.6", "fd00::5"]),
            &[],
        );
        assert!(reconcile(&mut kernel, &grown).unwrap());
        assert!(ns
            .ok("ipset list tollgate-endpoints-v4")
            .contains("10.0.0.6"));
        assert!(Changes::between(&grown, &kernel.installed().unwrap()).is_empty());

        // What a crashed agent of another configuration left behind.
        ns.ok(
            "iptables -N TOLLGATE-OLD && iptables -I INPUT 1 -j TOLLGATE-OLD \
               && iptables -I FORWARD 1 -j TOLLGATE-FORWARD && ipset create tollgate-stale hash:ip",
        );
        assert!(reconcile(&mut kernel, &grown).unwrap());
        assert!(Changes::between(&grown, &kernel.installed().unwrap()).is_empty());
        let save = ns.ok("iptables-save -t filter");
        assert_eq!(save.matches("-j TOLLGATE-FORWARD").count(), 1, "{save}");
        assert!(!save.contains("TOLLGATE-OLD"), "{save}");
        assert!(!ns.ok("ipset list -n").contains("tollgate-stale"));

        teardown(&mut kernel).unwrap();
        let v4 = ns.ok("iptables-save -t filter");
        let v6 = ns.ok("ip6tables-save -t filter");
        assert!(
            !v4.contains("TOLLGATE") && !v6.contains("TOLLGATE"),
            "{v4}{v6}"
        );
        assert!(v4.contains("-A INPUT -s 192.0.2.1/32 -j DROP"), "{v4}");
        assert!(v6.contains("-A OUTPUT -d 2001:db8::1/128 -j DROP"), "{v6}");
        assert_eq!(ns.ok("ipset list -n").trim(), "foreign");
    });
}
