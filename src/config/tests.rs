use std::path::{Path, PathBuf};
use std::time::Duration;

use super::layers::{camel_case, FLAT_KEYS};
use super::*;
use crate::audit::AuditFormat;
use crate::fqdn::FqdnResolve;
use crate::fqdn::QueryBounds;
use crate::http::FramingPolicy;
use crate::l7::DenyResponse;
use crate::l7::UrgentData;
use crate::marks::FailMode;
use crate::marks::MarkLayout;

fn machine() -> MachineDefaults {
    MachineDefaults {
        node_name: "host".into(),
        queues: 2,
    }
}

fn load(yaml: &str, settings: &[Setting]) -> Result<Loaded, ConfigError> {
    AgentConfig::load(&machine(), Some((Path::new("c.yaml"), yaml)), settings)
}

fn config(yaml: &str) -> AgentConfig {
    load(yaml, &[]).unwrap().config
}

fn error(yaml: &str) -> String {
    load(yaml, &[]).unwrap_err().to_string()
}

fn set(text: &str) -> Setting {
    text.parse().unwrap()
}

#[test]
fn empty_settings_resolve_to_defaults() {
    let config = AgentConfig::load(&machine(), None, &[]).unwrap().config;
    assert_eq!(config, self::config(""));
    assert_eq!(config.node.name, "host");
    let queues = config.queue_numbers();
    assert_eq!(queues.connection.first(), 100);
    assert_eq!(queues.connection.last(), 101);
    let marks = config.datapath.mark_mask;
    assert_eq!(marks.mask, 0xf0_0000);
    assert_eq!(marks.allow, 0x10_0000);
    assert_eq!(marks.reject, 0x20_0000);
    assert_eq!(config.datapath.fail_mode, FailMode::Closed);
    assert!(config.datapath.interfaces.is_empty());
    assert_eq!(
        config.fqdn,
        FqdnConfig {
            dns_queue: 102,
            dns_log_group: 101,
            query_log_buffer: 4 << 20,
            trusted_servers: vec![],
            min_ttl: 5,
            max_ttl: 86_400,
            max_outstanding_queries: 65_536,
            query_timeout: 30,
            max_addresses_per_name: 128,
            max_addresses: 65_536,
            write_queue: 4096,
            resolve: FqdnResolve::Exact,
            resolvers: vec![],
            resolve_concurrency: 8,
            resolve_backoff_cap: 300,
        }
    );
    assert_eq!(marks.l7, 0x40_0000);
    assert_eq!(config.l7.queue, 103);
    assert_eq!(config.l7.deny_response, DenyResponse::Forbidden);
    assert_eq!(config.l7.max_flows, L7Config::default().max_flows);
    assert_eq!(config.audit, AuditConfig::default());
    // The defaults of the sections, with one connection queue, agree.
    let one = MachineDefaults {
        node_name: "host".into(),
        queues: 1,
    };
    let config = AgentConfig::load(&one, None, &[]).unwrap().config;
    assert_eq!(
        config,
        AgentConfig {
            node: NodeConfig {
                name: "host".into(),
                ..NodeConfig::default()
            },
            ..AgentConfig::default()
        }
    );
}

#[test]
fn l7_keys() {
    let config =
        config("l7: {queue: 9, denyResponse: reset, maxFlows: 10, idleTimeoutSeconds: 30}");
    assert_eq!(config.l7.queue, 9);
    assert_eq!(config.l7.deny_response, DenyResponse::Reset);
    assert_eq!(config.l7.max_flows, 10);
    assert_eq!(config.l7.idle_timeout, Duration::from_secs(30));
    for forbidden in ["l7: {denyResponse: '403'}", "l7: {denyResponse: 403}"] {
        assert_eq!(
            self::config(forbidden).l7.deny_response,
            DenyResponse::Forbidden
        );
    }
    for bad in [
        "l7: {queue: 101}",
        "l7: {queue: 102}",
        "l7: {maxFlows: 0}",
        "l7: {idleTimeoutSeconds: 0}",
        "l7: {denyResponse: teapot}",
        "l7: {queues: 0}",
        "l7: {queues: 65}",
        "l7: {queue: 65535, queues: 2}",
        // The second L7 queue would be the DNS queue.
        "l7: {queue: 100, queues: 2}\nfqdn: {dnsQueue: 101}\nqueues: {base: 10}",
    ] {
        assert!(load(bad, &[]).is_err(), "{bad}");
    }
    // A DNS queue moved elsewhere leaves the L7 queue right after.
    assert_eq!(self::config("fqdn: {dnsQueue: 50}").l7.queue, 102);
    // Several L7 queues by default, placed clear of the DNS queue.
    let c = self::config("fqdn: {dnsQueue: 103}");
    assert_eq!((c.l7.queue, c.l7.queues), (104, 2));
    assert_eq!(c.queue_numbers().l7.iter().collect::<Vec<_>>(), [104, 105]);
}

#[test]
fn fqdn_keys_and_bounds() {
    let config = config(
        "fqdn: {dnsQueue: 9, trustedServers: [10.0.0.53], minTtl: 1,\n\
         maxAddressesPerName: 100, maxAddresses: 1000}",
    );
    assert_eq!(config.fqdn.dns_queue, 9);
    assert_eq!(config.fqdn.trusted_servers.len(), 1);
    assert_eq!(config.fqdn.min_ttl, 1);
    assert_eq!(config.fqdn.learner().max_addresses, 1000);
    let clash = error("fqdn: {dnsQueue: 101}");
    assert!(clash.contains("dnsQueue 101"), "{clash}");
    let small = error("fqdn: {maxAddressesPerName: 99}");
    assert!(small.contains("at least 100"), "{small}");
    let large = error("fqdn: {maxAddresses: 65537}");
    assert!(large.contains("at most 65536"), "{large}");
    assert!(load("queues: {base: 65534, count: 2}", &[]).is_err());
    let config =
        self::config("fqdn: {minTtl: 10, maxTtl: 600, maxOutstandingQueries: 10, queryTimeout: 5}");
    assert_eq!(config.fqdn.learner().max_ttl_secs, 600);
    assert_eq!(config.fqdn.resolve, FqdnResolve::Exact);
    assert_eq!(config.fqdn.resolve_bounds().min_ttl_secs, 10);
    assert_eq!(config.fqdn.resolve_bounds().max_ttl_secs, 600);
    assert_eq!(config.fqdn.resolve_bounds().concurrency, 8);
    assert_eq!(config.fqdn.resolve_bounds().max_backoff_ms, 300_000);
    let resolving = self::config(
        "fqdn: {resolve: off, resolvers: [10.0.0.53, 'fd00::53'], resolveConcurrency: 2, resolveBackoffCap: 60}",
    );
    assert_eq!(resolving.fqdn.resolve, FqdnResolve::Off);
    assert_eq!(resolving.fqdn.resolvers.len(), 2);
    assert_eq!(resolving.fqdn.resolve_bounds().concurrency, 2);
    assert_eq!(resolving.fqdn.resolve_bounds().max_backoff_ms, 60_000);
    assert_eq!(
        config.fqdn.query_bounds(),
        QueryBounds {
            max_outstanding: 10,
            timeout_secs: 5
        }
    );
    for (bad, expected) in [
        ("fqdn: {minTtl: 10, maxTtl: 9}", "fqdn.maxTtl"),
        ("fqdn: {minTtl: 0, maxTtl: 0}", "fqdn.maxTtl"),
        ("fqdn: {maxTtl: 2147484}", "at most 2147483"),
        (
            "fqdn: {maxOutstandingQueries: 0}",
            "fqdn.maxOutstandingQueries",
        ),
        ("fqdn: {queryTimeout: 0}", "fqdn.queryTimeout"),
        ("fqdn: {writeQueue: 0}", "fqdn.writeQueue"),
        ("fqdn: {resolve: wildcard}", "resolve"),
        ("fqdn: {resolvers: [not-an-address]}", "resolvers"),
        ("fqdn: {resolveConcurrency: 1}", "fqdn.resolveConcurrency"),
        ("fqdn: {resolveConcurrency: 65}", "between 2 and 64"),
        ("fqdn: {resolveBackoffCap: 0}", "fqdn.resolveBackoffCap"),
        ("fqdn: {resolveBackoffCap: 86401}", "between 1 and 86400"),
    ] {
        let message = error(bad);
        assert!(message.contains(expected), "{bad}: {message}");
    }
}

#[test]
fn file_keys_are_camel_case_and_settings_override() {
    let yaml = "node: {name: n1, labels: {role: cp}, addresses: [10.0.0.1, 'fd00::1']}\n\
                queues: {count: 3, base: 7}\n\
                datapath:\n  interfaces: ['veth*', eth0]\n  markMask: '0x70000'\n  failMode: open\n\
                \x20 privileged:\n  - {cidr: 10.0.0.0/24, protocol: TCP, port: 22}\n\
                audit: {file: /var/log/np.log}\nmetrics: {address: 127.0.0.1:9100}\n";
    let settings = [set("queues.count=1"), set("datapath.failMode=closed")];
    let config = load(yaml, &settings).unwrap().config;
    assert_eq!(config.node.name, "n1");
    assert_eq!(config.node.labels["role"], "cp");
    assert_eq!(config.node.addresses.len(), 2);
    assert_eq!(config.datapath.interfaces[0].as_iptables(), "veth+");
    assert_eq!(config.datapath.interfaces[1].as_iptables(), "eth0");
    let queues = config.queue_numbers().connection;
    assert_eq!((queues.first(), queues.last()), (7, 7));
    assert_eq!(config.datapath.mark_mask.allow, 0x10000);
    assert_eq!(config.datapath.mark_mask.reject, 0x20000);
    assert_eq!(config.datapath.fail_mode, FailMode::Closed);
    assert_eq!(
        config.datapath.privileged,
        vec![Privileged {
            cidr: "10.0.0.0/24".parse().unwrap(),
            protocol: Some(PrivilegedProtocol::Tcp),
            port: Some(22),
            hooks: NODE_HOOKS.to_vec(),
        }]
    );
    assert_eq!(config.audit.file, Some(PathBuf::from("/var/log/np.log")));
    assert_eq!((config.audit.rate, config.audit.burst), (500, 1000));
    assert_eq!(config.audit.max_files, 3);
    assert_eq!(config.status.socket, None);
    assert_eq!(
        config.metrics.address,
        Some("127.0.0.1:9100".parse().unwrap())
    );
    // A number mask, and privileged entries and labels as text.
    let config = self::config(
        "node: {labels: 'a=1,b='}\n\
         datapath: {markMask: 0x70000, privileged: ['10.0.0.7,tcp/22']}",
    );
    assert_eq!(config.datapath.mark_mask.mask, 0x70000);
    assert_eq!(config.datapath.privileged[0].port, Some(22));
    assert_eq!(config.node.labels["b"], "");
}

#[test]
fn audit_and_status_keys() {
    let config = config(
        "audit: {rate: 5000, burst: 10000, maxBytes: 1048576, maxFiles: 0}\n\
         status: {socket: /tmp/t.sock}",
    );
    assert_eq!((config.audit.rate, config.audit.burst), (5000, 10000));
    assert_eq!(config.audit.max_bytes, 1 << 20);
    assert_eq!(config.audit.max_files, 0);
    assert_eq!(config.status.socket, Some(PathBuf::from("/tmp/t.sock")));
    for (bad, key) in [
        ("audit: {rate: 0}", "audit.rate"),
        ("audit: {burst: 0}", "audit.burst"),
        ("audit: {maxBytes: 100}", "audit.maxBytes"),
    ] {
        let err = error(bad);
        assert!(err.starts_with(key), "{err}");
    }
}

#[test]
fn unknown_keys_and_bad_values_are_errors() {
    let err = error("node: {nme: x}\n");
    assert!(
        err.starts_with("c.yaml: node.nme: unknown field `nme`"),
        "{err}"
    );
    let err = error("nodes: {}\n");
    assert!(
        err.starts_with("c.yaml: nodes: unknown field `nodes`"),
        "{err}"
    );
    let err = error("datapath: {failMode: maybe}\n");
    assert!(err.starts_with("c.yaml: datapath.failMode: "), "{err}");
    let port_without_proto = "datapath:\n  privileged:\n  - {cidr: 10.0.0.0/8, port: 22}\n";
    assert!(error(port_without_proto).contains("a port needs a protocol"));
    assert!(error("node: [").starts_with("c.yaml: "));
    // A bad setting is blamed on the command line, not the file.
    let err = load("", &[set("datapath.failMode=maybe")]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the command line: datapath.failMode"),
        "{err}"
    );
}

#[test]
fn the_flat_layout_is_still_read() {
    let flat = "nodeName: n1\nnodeLabels: {role: cp}\nnodeAddresses: [10.0.0.1]\n\
                queues: 3\nqueueBase: 7\ninterfaces: [eth0]\nmarkMask: '0x70000'\n\
                failMode: open\nprivileged: [{cidr: 10.0.0.0/24}]\ndnsQueue: 20\n\
                dnsTrustedServers: [10.0.0.53]\nfqdnMinTtl: 1\nfqdnMaxAddressesPerName: 100\n\
                fqdnMaxAddresses: 1000\nl7Queue: 21\nl7DenyResponse: reset\nl7MaxFlows: 10\n\
                l7IdleTimeoutSeconds: 30\nauditLog: /l\nauditRate: 1\nauditBurst: 5\n\
                auditLogMaxBytes: 4096\nauditLogMaxFiles: 0\nstatusSocket: /s\n\
                metricsAddress: 127.0.0.1:9461\n";
    let nested = "node: {name: n1, labels: {role: cp}, addresses: [10.0.0.1]}\n\
                  queues: {count: 3, base: 7}\n\
                  datapath: {interfaces: [eth0], markMask: '0x70000', failMode: open,\n\
                  \x20 privileged: [{cidr: 10.0.0.0/24}]}\n\
                  fqdn: {dnsQueue: 20, trustedServers: [10.0.0.53], minTtl: 1,\n\
                  \x20 maxAddressesPerName: 100, maxAddresses: 1000}\n\
                  l7: {queue: 21, denyResponse: reset, maxFlows: 10, idleTimeoutSeconds: 30}\n\
                  audit: {file: /l, rate: 1, burst: 5, maxBytes: 4096, maxFiles: 0}\n\
                  status: {socket: /s}\nmetrics: {address: 127.0.0.1:9461}\n";
    let old = load(flat, &[]).unwrap();
    let new = load(nested, &[]).unwrap();
    assert_eq!(old.config, new.config);
    assert_eq!(old.deprecated.len(), FLAT_KEYS.len());
    assert!(new.deprecated.is_empty());
    assert!(old.deprecated.contains(&("failMode", "datapath.failMode")));
    // Flat and nested may mix, but not for the same key.
    let mixed = load("failMode: open\nqueues: {count: 1}\n", &[]).unwrap();
    assert_eq!(mixed.config.datapath.fail_mode, FailMode::Open);
    assert_eq!(mixed.deprecated, [("failMode", "datapath.failMode")]);
    let twice = error("failMode: open\ndatapath: {failMode: closed}\n");
    assert!(twice.starts_with("failMode is the key"), "{twice}");
}

#[test]
fn set_takes_a_key_path_and_a_yaml_value() {
    let config = load(
        "node: {labels: {role: cp}}",
        &[
            set("fqdn.minTtl=10"),
            set("node.labels.kubernetes.io/os=linux"),
            set("fqdn.trustedServers=[10.0.0.53, 'fd00::53']"),
            set("l7={maxFlows: 7}"),
        ],
    )
    .unwrap()
    .config;
    assert_eq!(config.fqdn.min_ttl, 10);
    assert_eq!(config.node.labels["role"], "cp");
    assert_eq!(config.node.labels["kubernetes.io/os"], "linux");
    assert_eq!(config.fqdn.trusted_servers.len(), 2);
    assert_eq!(config.l7.max_flows, 7);
    for bad in [
        "fqdn.minTtl",
        "=1",
        "fqdn..minTtl=1",
        "fqdn.minTtl=[",
        ".x=1",
    ] {
        assert!(bad.parse::<Setting>().is_err(), "{bad}");
    }
    let unknown = load("", &[set("fqdn.minTTL=1")]).unwrap_err().to_string();
    assert!(unknown.contains("unknown field `minTTL`"), "{unknown}");
}

#[test]
fn every_flag_sets_a_key_of_its_section() {
    let flags = flags();
    let names: Vec<&str> = flags.iter().filter_map(|f| f.arg.get_long()).collect();
    assert_eq!(
        names,
        [
            "node-name",
            "node-labels",
            "node-address",
            "queues",
            "queue-base",
            "interfaces",
            "mark-mask",
            "fail-mode",
            "privileged",
            "startup-policy",
            "drift-check-seconds",
            "cleanup-on-exit",
            "queue-receive-buffer-bytes",
            "dns-queue",
            "dns-trusted-server",
            "fqdn-min-ttl",
            "fqdn-max-ttl",
            "fqdn-resolve",
            "fqdn-resolver",
            "l7-queues",
            "l7-deny-response",
            "l7-urgent-data",
            "audit-log",
            "status-socket",
            "metrics-address",
            "stall-timeout",
            "docker",
            "docker-host",
            "docker-namespace-label",
            "verdict-cache",
            "anti-spoofing",
            "allowed-source-prefix",
        ]
    );
    let value = |name: &str| match name {
        "node-name" => "n1",
        "node-labels" => "a=1",
        "node-address" | "dns-trusted-server" | "fqdn-resolver" => "10.0.0.1",
        "fqdn-resolve" => "off",
        "queues" | "fqdn-min-ttl" => "2",
        "fqdn-max-ttl" => "3600",
        "queue-base" => "200",
        "dns-queue" => "300",
        "interfaces" => "eth0",
        "mark-mask" => "0x70000",
        "fail-mode" => "open",
        "privileged" => "10.0.0.0/24,tcp/22",
        "startup-policy" => "open",
        "drift-check-seconds" => "30",
        "cleanup-on-exit" | "docker" => "true",
        "docker-namespace-label" => "tier",
        "queue-receive-buffer-bytes" => "65536",
        "l7-queues" => "3",
        "l7-deny-response" => "403",
        "l7-urgent-data" => "strip",
        "audit-log" | "status-socket" | "docker-host" => "/tmp/x",
        "stall-timeout" => "3",
        "verdict-cache" | "anti-spoofing" => "off",
        "allowed-source-prefix" => "apps/router=10.9.0.0/16",
        _ => "127.0.0.1:9100",
    };
    let settings: Vec<Setting> = flags
        .iter()
        .map(|f| f.setting(vec![value(f.arg.get_long().unwrap()).into()]))
        .collect();
    let config = load("", &settings).unwrap().config;
    let defaults = AgentConfig::default();
    let expected = AgentConfig {
        node: NodeConfig {
            name: "n1".into(),
            labels: [("a".into(), "1".into())].into(),
            addresses: vec!["10.0.0.1".parse().unwrap()],
        },
        queues: QueuesConfig {
            count: 2,
            base: 200,
        },
        datapath: DatapathConfig {
            interfaces: vec!["eth0".parse().unwrap()],
            mark_mask: MarkLayout::new(0x70000).unwrap(),
            fail_mode: FailMode::Open,
            privileged: vec!["10.0.0.0/24,tcp/22".parse().unwrap()],
            startup_policy: StartupPolicy::Open,
            drift_check_seconds: 30,
            cleanup_on_exit: true,
            queue_receive_buffer_bytes: 65536,
        },
        fqdn: FqdnConfig {
            dns_queue: 300,
            trusted_servers: vec!["10.0.0.1".parse().unwrap()],
            min_ttl: 2,
            max_ttl: 3600,
            resolve: FqdnResolve::Off,
            resolvers: vec!["10.0.0.1".parse().unwrap()],
            ..defaults.fqdn
        },
        l7: L7Config {
            queue: 202,
            queues: 3,
            urgent_data: UrgentData::Strip,
            ..defaults.l7
        },
        audit: AuditConfig {
            file: Some("/tmp/x".into()),
            ..defaults.audit
        },
        status: StatusConfig {
            socket: Some("/tmp/x".into()),
        },
        metrics: MetricsConfig {
            address: Some("127.0.0.1:9100".parse().unwrap()),
        },
        policy_files: defaults.policy_files,
        kubernetes: defaults.kubernetes,
        verdict_cache: VerdictCacheConfig {
            enabled: Switch::Off,
            ..defaults.verdict_cache
        },
        anti_spoofing: AntiSpoofingConfig {
            enabled: Switch::Off,
            allowed_source_prefixes: vec!["apps/router=10.9.0.0/16".parse().unwrap()],
        },
        health: HealthConfig {
            stall_timeout_seconds: 3,
        },
        docker: DockerConfig {
            enabled: true,
            host: "/tmp/x".into(),
            namespace_label: "tier".into(),
            ..defaults.docker
        },
    };
    assert_eq!(config, expected);
    // Text keys stay text.
    let name = flags.iter().find(|f| f.key == "node.name").unwrap();
    let config = load("", &[name.setting(vec!["1.5".into()])])
        .unwrap()
        .config;
    assert_eq!(config.node.name, "1.5");
}

/// An entry's hooks default to the Node's own traffic; `forward` only
/// when listed; the text form always means the Node's own.
#[test]
fn privileged_hooks_default_to_the_node_and_forward_is_explicit() {
    use PrivilegedHook::{Forward, Input, Output};
    let config = config(
        "datapath:\n  privileged:\n\
         \x20 - {cidr: 10.0.0.0/8, protocol: TCP, port: 22}\n\
         \x20 - {cidr: 10.1.0.0/16, hooks: [forward, INPUT, forward]}\n\
         \x20 - '10.2.0.0/16,udp/53'\n",
    );
    let hooks: Vec<&[PrivilegedHook]> = config
        .datapath
        .privileged
        .iter()
        .map(|p| p.hooks.as_slice())
        .collect();
    assert_eq!(
        hooks,
        [&[Input, Output][..], &[Input, Forward], &[Input, Output]]
    );
    assert!(!config.datapath.privileged[0].on(Forward));
    let shown: Vec<String> = config
        .datapath
        .privileged
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        [
            "10.0.0.0/8,tcp/22",
            "10.1.0.0/16 on input,forward",
            "10.2.0.0/16,udp/53"
        ]
    );
    for (bad, expected) in [
        (
            "datapath: {privileged: [{cidr: 10.0.0.0/8, hooks: []}]}",
            "hooks must name at least one of input, output, forward",
        ),
        (
            "datapath: {privileged: [{cidr: 10.0.0.0/8, hooks: [prerouting]}]}",
            "unknown variant `prerouting`",
        ),
    ] {
        let message = error(bad);
        assert!(message.contains(expected), "{bad}: {message}");
    }
}

#[test]
fn privileged_flag_syntax() {
    let p: Privileged = "10.0.0.7,tcp/22".parse().unwrap();
    assert_eq!(p.cidr.to_string(), "10.0.0.7/32");
    assert_eq!(p.protocol, Some(PrivilegedProtocol::Tcp));
    assert_eq!(p.port, Some(22));
    let p: Privileged = "fd00::/64,icmp".parse().unwrap();
    assert_eq!((p.protocol, p.port), (Some(PrivilegedProtocol::Icmp), None));
    let p: Privileged = "192.168.1.9/24".parse().unwrap();
    assert_eq!(p.cidr.to_string(), "192.168.1.0/24");
    for bad in [
        "nope",
        "10.0.0.0/8,gre",
        "10.0.0.0/8,tcp/0",
        "10.0.0.0/8,icmp/3",
    ] {
        assert!(bad.parse::<Privileged>().is_err(), "{bad}");
    }
}

#[test]
fn interfaces_and_queues_and_labels() {
    assert!("eth*0".parse::<Interface>().is_err());
    assert!("*".parse::<Interface>().is_err());
    assert!("averyveryverylongname".parse::<Interface>().is_err());
    let queues = |count, base| QueuesConfig { count, base };
    assert!(queues(2, 65535).validate().is_err());
    assert!(queues(0, 1).validate().is_err());
    assert_eq!(
        queues(2, 65534).range().iter().collect::<Vec<_>>(),
        vec![65534, 65535]
    );
    let labels = parse_labels("a=1,b=").unwrap();
    assert_eq!(labels["b"], "");
    assert!(parse_labels("a").is_err());
}

#[test]
fn camel_case_matches_serde() {
    assert_eq!(camel_case("max_addresses_per_name"), "maxAddressesPerName");
    assert_eq!(camel_case("name"), "name");
}

#[test]
fn the_stall_timeout_defaults_to_ten_seconds_and_zero_is_refused() {
    let config = load("", &[]).unwrap().config;
    assert_eq!(config.health.stall_timeout(), Duration::from_secs(10));
    let error = load("health:\n  stallTimeoutSeconds: 0\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("health.stallTimeoutSeconds 0: must be at least 1"),
        "{error}"
    );
}

#[test]
fn audit_format_key() {
    assert_eq!(config("").audit.format, AuditFormat::Text);
    assert_eq!(
        config("audit: {format: json}\n").audit.format,
        AuditFormat::Json
    );
    let c = load("", &[set("audit.format=json")]).unwrap().config;
    assert_eq!(c.audit.format, AuditFormat::Json);
    let bad = load("audit: {format: xml}\n", &[]).unwrap_err().to_string();
    assert!(bad.contains("expected text or json"), "{bad}");
}

#[test]
fn l7_urgent_data_and_strict_framing_keys() {
    let defaults = config("");
    assert_eq!(defaults.l7.urgent_data, UrgentData::Reset);
    assert!(defaults.l7.strict_framing);
    assert_eq!(defaults.l7.framing(), FramingPolicy::Strict);
    let c = config("l7: {urgentData: strip, strictFraming: false}\n");
    assert_eq!(c.l7.urgent_data, UrgentData::Strip);
    assert_eq!(c.l7.framing(), FramingPolicy::Lenient);
    let c = load("", &[set("l7.allowBodyOn=[GET, DELETE]")])
        .unwrap()
        .config;
    assert_eq!(
        c.l7.framing(),
        FramingPolicy::StrictAllowingBodies(vec!["GET".to_string(), "DELETE".to_string()].into())
    );
    let bad = load("l7: {urgentData: oob}\n", &[])
        .unwrap_err()
        .to_string();
    assert!(bad.contains("expected reset or strip"), "{bad}");
    let bad = load("l7: {allowBodyOn: [POST]}\n", &[])
        .unwrap_err()
        .to_string();
    assert!(bad.contains("l7.allowBodyOn \"POST\""), "{bad}");
}

#[test]
fn docker_section_defaults_and_checks() {
    let config = load("", &[]).unwrap().config;
    assert!(!config.docker.enabled);
    assert_eq!(config.docker.host, DEFAULT_DOCKER_HOST);
    assert_eq!(
        config.docker.socket().unwrap(),
        std::path::Path::new("/var/run/docker.sock")
    );
    assert_eq!(config.docker.namespace_label, "com.docker.compose.project");
    assert_eq!(config.docker.ports_label, "tollgate.io/ports");
    let config = load(
        "docker: {enabled: true, host: /run/podman/podman.sock, namespaceLabel: team, portsLabel: ports}\n",
        &[],
    )
    .unwrap()
    .config;
    assert!(config.docker.enabled);
    assert_eq!(
        config.docker.socket().unwrap(),
        std::path::Path::new("/run/podman/podman.sock")
    );
    for bad in [
        "docker: {host: tcp://10.0.0.1:2375}\n",
        "docker: {host: docker.sock}\n",
        "docker: {host: 'unix://'}\n",
        "docker: {namespaceLabel: ''}\n",
        "docker: {portsLabel: ' '}\n",
    ] {
        let error = load(bad, &[]).unwrap_err().to_string();
        assert!(error.contains("docker."), "{bad}: {error}");
    }
}

#[test]
fn verdict_cache_is_on_by_default_switched_by_flag_or_file_and_bounded() {
    let defaults = AgentConfig::default().verdict_cache;
    assert!(defaults.enabled());
    assert_eq!(
        (defaults.max_entries, defaults.timeout_seconds),
        (65_536, 60)
    );
    let file = load(
        "verdictCache: {enabled: false, maxEntries: 1000, timeoutSeconds: 5}\n",
        &[],
    )
    .unwrap()
    .config
    .verdict_cache;
    assert_eq!(
        file,
        VerdictCacheConfig {
            enabled: Switch::Off,
            max_entries: 1000,
            timeout_seconds: 5
        }
    );
    for (text, enabled) in [("on", true), ("off", false), ("true", true)] {
        let config = load(&format!("verdictCache: {{enabled: {text}}}\n"), &[]).unwrap();
        assert_eq!(config.config.verdict_cache.enabled(), enabled, "{text}");
    }
    for bad in [
        "verdictCache: {enabled: maybe}\n",
        "verdictCache: {maxEntries: 0}\n",
        "verdictCache: {timeoutSeconds: 0}\n",
        "verdictCache: {timeoutSeconds: 3000000}\n",
        "verdictCache: {timeoutSeconds: 3601}\n",
    ] {
        assert!(load(bad, &[]).is_err(), "{bad}");
    }
    assert!(load("verdictCache: {timeoutSeconds: 3600}\n", &[]).is_ok());
}

#[test]
fn anti_spoofing_is_on_by_default_and_allowed_sources_read_as_maps_or_text() {
    let defaults = AgentConfig::default().anti_spoofing;
    assert!(defaults.enabled());
    assert!(defaults.allowed_source_prefixes.is_empty());
    let config = load(
        "antiSpoofing:\n  allowedSourcePrefixes:\n\
         \x20 - {endpoint: apps/router, cidr: 10.9.0.0/16}\n\
         \x20 - {cidr: 'fd09::/64'}\n\
         \x20 - {endpoint: apps/vm}\n\
         \x20 - 'apps/web=10.1.2.3'\n",
        &[],
    )
    .unwrap()
    .config
    .anti_spoofing;
    let text: Vec<String> = config
        .allowed_source_prefixes
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(
        text,
        [
            "apps/router=10.9.0.0/16",
            "*=fd09::/64",
            "apps/vm",
            "apps/web=10.1.2.3/32"
        ]
    );
    let router = &config.allowed_source_prefixes[0];
    assert!(router.endpoint.covers("apps", "router"));
    assert!(!router.endpoint.covers("apps", "web"));
    assert!(config.allowed_source_prefixes[1]
        .endpoint
        .covers("any", "thing"));
    let off = load("antiSpoofing: {enabled: off}\n", &[]).unwrap().config;
    assert!(!off.anti_spoofing.enabled());
    for bad in [
        "antiSpoofing: {allowedSourcePrefixes: ['*']}\n",
        "antiSpoofing: {allowedSourcePrefixes: [{endpoint: '*'}]}\n",
        "antiSpoofing: {allowedSourcePrefixes: ['apps=10.0.0.0/8']}\n",
        "antiSpoofing: {allowedSourcePrefixes: ['apps/x/y=10.0.0.0/8']}\n",
        "antiSpoofing: {allowedSourcePrefixes: ['apps/x=10.0.0.300/8']}\n",
        "antiSpoofing: {allowedSourcePrefixes: [{endpoint: apps/x, prefix: 10.0.0.0/8}]}\n",
    ] {
        let error = load(bad, &[]).unwrap_err().to_string();
        assert!(error.contains("allowedSourcePrefixes"), "{bad}: {error}");
    }
}

#[test]
fn kubernetes_peers_is_watch_unless_set_to_controller() {
    let peers =
        |file: &str, settings: &[Setting]| load(file, settings).map(|l| l.config.kubernetes.peers);
    assert_eq!(peers("", &[]).unwrap(), Peers::Watch);
    assert_eq!(
        peers("kubernetes: {peers: controller}", &[]).unwrap(),
        Peers::Controller
    );
    assert_eq!(
        peers(
            "kubernetes: {peers: controller}",
            &[set("kubernetes.peers=watch")]
        )
        .unwrap(),
        Peers::Watch
    );
    assert!(peers("kubernetes: {peers: sometimes}", &[]).is_err());
}
