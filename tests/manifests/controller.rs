//! The controller's kustomization (`docker/controller/`): the AddressGroup
//! CRD matches the wire form the controller writes and agents read, the
//! RBAC grants no more than the controller does, and the Deployment runs
//! two non-root replicas with probes on the controller's endpoint.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use tollgate::controller::lease;
use tollgate::selection::group::{self, canonical, AddressGroupSpec, GroupMember, GroupNamedPort};
use tollgate::selection::{NamespaceScope, Selection};

use super::*;

fn slice(members: usize) -> Value {
    let selection = Selection::Pods {
        namespaces: NamespaceScope::named("shop"),
        pods: None,
    };
    let member = GroupMember {
        ips: ["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()]
            .as_slice()
            .into(),
        named_ports: [GroupNamedPort {
            name: "http".into(),
            protocol: tollgate::model::PortProtocol::Tcp,
            port: 80,
        }]
        .into(),
    };
    let spec = AddressGroupSpec {
        selection: canonical(&selection),
        slice: 0,
        slices: vec![1, 2],
        members: vec![member; members],
    };
    group::object("k-0", "k", &spec)
}

/// Mutation: `maxItems: 100` removed from the schema lets the slice of
/// 101 members through, and the test fails.
#[test]
fn the_address_group_crd_is_structural_and_admits_what_the_controller_writes() {
    let docs = documents("controller/crd.yaml");
    assert_eq!(docs.len(), 1);
    let crd: CustomResourceDefinition = roundtrip(&docs[0]);
    assert_eq!(crd.spec.group, group::GROUP);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.kind, group::KIND);
    assert_eq!(crd.spec.names.plural, group::PLURAL);
    assert_eq!(crd.spec.versions.len(), 1);
    assert_eq!(crd.spec.versions[0].name, group::VERSION);
    let mut problems = Vec::new();
    check_structural(open_api_schema(&docs[0]), "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(&as_json_schema(open_api_schema(&docs[0])))
        .unwrap();
    for members in [0, 1, 100] {
        let object = slice(members);
        let errors: Vec<String> = validator
            .iter_errors(&object)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{members} members: {errors:?}");
    }
    // More than a slice holds, an unknown field, a bad protocol: refused.
    assert!(!validator.is_valid(&slice(101)));
    let mut unknown = slice(1);
    unknown["spec"]["members"][0]["name"] = json!("web-1");
    assert!(!validator.is_valid(&unknown));
    let mut protocol = slice(1);
    protocol["spec"]["members"][0]["namedPorts"][0]["protocol"] = json!("ICMP");
    assert!(!validator.is_valid(&protocol));
}

/// Mutation: `watch` granted on addressgroups, or `delete` on the Lease,
/// fails the test (each verb is the one the controller uses).
#[test]
fn the_controller_rbac_grants_reads_of_what_it_watches_and_writes_of_its_groups_and_lease() {
    let docs = documents("controller/rbac.yaml");
    assert_eq!(docs.len(), 5);
    let account: ServiceAccount = roundtrip(&docs[0]);
    let role: ClusterRole = roundtrip(&docs[1]);
    let binding: ClusterRoleBinding = roundtrip(&docs[2]);
    let lease_role: Role = roundtrip(&docs[3]);
    let lease_binding: RoleBinding = roundtrip(&docs[4]);
    let rules = role.rules.unwrap();
    let is_groups = |r: &&PolicyRule| r.api_groups.as_deref().unwrap_or_default() == [group::GROUP];
    for rule in rules.iter().filter(|r| !is_groups(r)) {
        assert_eq!(rule.verbs, ["list", "watch"]);
    }
    let groups: Vec<_> = rules.iter().filter(is_groups).collect();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        groups[0].resources.as_deref().unwrap_or_default(),
        [group::PLURAL]
    );
    assert_eq!(groups[0].verbs, ["list", "create", "patch", "delete"]);
    for resource in tollgate::source::kube::watched() {
        assert!(
            rules.iter().any(|r| {
                r.api_groups.as_deref().unwrap_or_default() == [resource.group]
                    && r.resources
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .any(|p| p == resource.plural)
            }),
            "{} not granted",
            resource.plural
        );
    }
    // The one Lease: get and update by name, create (which cannot be
    // limited to a name), in its namespace.
    assert_eq!(
        lease_role.metadata.namespace.as_deref(),
        Some(lease::NAMESPACE)
    );
    let lease_rules = lease_role.rules.unwrap();
    assert_eq!(lease_rules.len(), 2);
    for rule in &lease_rules {
        assert_eq!(
            rule.api_groups.as_deref().unwrap_or_default(),
            ["coordination.k8s.io"]
        );
        assert_eq!(rule.resources.as_deref().unwrap_or_default(), ["leases"]);
    }
    assert_eq!(
        lease_rules[0].resource_names.as_deref().unwrap_or_default(),
        [lease::NAME]
    );
    assert_eq!(lease_rules[0].verbs, ["get", "update"]);
    assert!(lease_rules[1].resource_names.is_none());
    assert_eq!(lease_rules[1].verbs, ["create"]);
    for (role_ref, subjects) in [
        (&binding.role_ref, binding.subjects.unwrap()),
        (&lease_binding.role_ref, lease_binding.subjects.unwrap()),
    ] {
        assert_eq!(role_ref.name, "tollgate-controller");
        assert_eq!(Some(&subjects[0].name), account.metadata.name.as_ref());
        assert_eq!(subjects[0].namespace, account.metadata.namespace);
    }
}

/// Mutation: the readiness probe on another port than `--listen`'s, or
/// `runAsNonRoot` removed, fails the test.
#[test]
fn the_controller_runs_two_non_root_replicas_probed_on_its_endpoint() {
    let docs = documents("controller/deployment.yaml");
    let deployment: Deployment = roundtrip(&docs[0]);
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("tollgate-controller")
    );
    let security = pod.security_context.unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert!(security.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
    assert!(pod.host_network.is_none());
    let container = &pod.containers[0];
    let own = container.security_context.clone().unwrap();
    assert_eq!(own.allow_privilege_escalation, Some(false));
    assert_eq!(own.read_only_root_filesystem, Some(true));
    let capabilities = own.capabilities.unwrap();
    assert_eq!(capabilities.drop.unwrap(), ["ALL"]);
    assert!(capabilities.add.is_none());
    let args = container.args.clone().unwrap();
    assert_eq!(args[0], "controller");
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .map(|i| &args[i + 1])
        .unwrap();
    let port = container.ports.as_ref().unwrap()[0].clone();
    assert!(listen.ends_with(&format!(":{}", port.container_port)));
    let probe_port = |probe: &Option<k8s_openapi::api::core::v1::Probe>, path: &str| {
        let get = probe.clone().unwrap().http_get.unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
        get.port
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    for (probe, path) in [
        (&container.liveness_probe, "/livez"),
        (&container.readiness_probe, "/readyz"),
    ] {
        match probe_port(probe, path) {
            IntOrString::String(name) => assert_eq!(Some(name), port.name.clone()),
            IntOrString::Int(number) => assert_eq!(number, port.container_port),
        }
    }
    let resources = container.resources.clone().unwrap();
    let requests = resources.requests.unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
    assert!(resources.limits.unwrap().contains_key("memory"));
    let env = container.env.clone().unwrap();
    let pod_name = env.iter().find(|e| e.name == "POD_NAME").unwrap();
    let field = pod_name.value_from.clone().unwrap().field_ref.unwrap();
    assert_eq!(field.field_path, "metadata.name");
}

/// `kubectl apply -k docker/controller` installs the CRD, the RBAC and
/// the Deployment, with the image of `docker/image` (the agent's).
#[test]
fn the_controller_kustomization_builds_with_the_agents_image() {
    let dir = root().join("docker/controller");
    let Some(built) = kustomize(&dir) else {
        return;
    };
    let mut manifests = Vec::new();
    for file in ["crd.yaml", "rbac.yaml", "deployment.yaml"] {
        manifests.extend(documents(&format!("controller/{file}")));
    }
    assert_eq!(kinds(&built), kinds(&manifests));
    let deployment = built.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(agent_pod().containers[0].image.clone().unwrap())
    );
}
