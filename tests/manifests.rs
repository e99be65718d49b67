//! The Kubernetes manifests in `docker/` are valid objects: every document
//! deserializes into its k8s-openapi type and serializes back to the same
//! JSON (so no field is misspelt or misplaced: the types would drop it).

use std::path::Path;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

fn documents(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docker")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Decodes `value` as `T` and checks nothing was lost on the way.
fn roundtrip<T: DeserializeOwned + Serialize>(value: &Value) -> T {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| {
        panic!("{e}: {value:#}");
    });
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, value, "fields lost or changed in the typed form");
    typed
}

#[test]
fn crds_are_custom_resource_definitions_for_every_kind_tollgate_watches() {
    let docs = documents("crds.yaml");
    let mut served = Vec::new();
    for doc in &docs {
        let crd: CustomResourceDefinition = roundtrip(doc);
        assert_eq!(crd.spec.group, "crd.antrea.io");
        let version = &crd.spec.versions[0];
        assert!(version.served && version.storage);
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{}.crd.antrea.io", crd.spec.names.plural).as_str())
        );
        served.push((
            crd.spec.names.kind.clone(),
            crd.spec.names.plural.clone(),
            crd.spec.scope,
            version.name.clone(),
        ));
    }
    let antrea = tollgate::source::kube::watched().filter(|r| r.group == "crd.antrea.io");
    for resource in antrea {
        let found = served
            .iter()
            .find(|(kind, plural, _, _)| kind == resource.type_name && plural == resource.plural)
            .unwrap_or_else(|| panic!("no CRD for {}", resource.plural));
        assert_eq!(found.3, resource.version, "{}", resource.plural);
        let namespaced = found.2 == "Namespaced";
        assert_eq!(
            namespaced,
            resource.kind.is_namespaced(),
            "{}",
            resource.plural
        );
    }
    assert_eq!(docs.len(), 6);
    // ExternalEntity (v1alpha2) is typed as in Antrea: the fields tollgate
    // reads are declared.
    let entity: CustomResourceDefinition = serde_json::from_value(docs[5].clone()).unwrap();
    let schema = entity.spec.versions[0].schema.clone().unwrap();
    let spec = &schema.open_api_v3_schema.unwrap().properties.unwrap()["spec"];
    let fields = spec.properties.as_ref().unwrap();
    let endpoint = fields["endpoints"].items.as_ref().unwrap();
    let endpoint = match endpoint {
        JSONSchemaPropsOrArray::Schema(schema) => schema.properties.as_ref().unwrap(),
        JSONSchemaPropsOrArray::Schemas(_) => panic!("endpoints items: one schema"),
    };
    assert!(endpoint.contains_key("ip") && endpoint.contains_key("name"));
    assert!(fields.contains_key("ports") && fields.contains_key("externalNode"));
}

#[test]
fn rbac_grants_list_and_watch_of_every_watched_resource_and_writes_only_events() {
    let docs = documents("rbac.yaml");
    assert_eq!(docs.len(), 3);
    let account: ServiceAccount = roundtrip(&docs[0]);
    let role: ClusterRole = roundtrip(&docs[1]);
    let binding: ClusterRoleBinding = roundtrip(&docs[2]);
    let rules = role.rules.unwrap();
    let is_events = |r: &&k8s_openapi::api::rbac::v1::PolicyRule| {
        r.api_groups.as_deref().unwrap_or_default() == ["events.k8s.io"]
    };
    for rule in rules.iter().filter(|r| !is_events(r)) {
        assert_eq!(rule.verbs, ["list", "watch"]);
    }
    let events: Vec<_> = rules.iter().filter(is_events).collect();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].resources.as_deref().unwrap_or_default(),
        ["events"]
    );
    assert_eq!(events[0].verbs, ["create", "patch"]);
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
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(Some(&subject.name), account.metadata.name.as_ref());
    assert_eq!(subject.namespace, account.metadata.namespace);
}

#[test]
fn daemonset_runs_on_the_host_network_with_two_capabilities() {
    let docs = documents("daemonset.yaml");
    assert_eq!(docs.len(), 1);
    let ds: DaemonSet = roundtrip(&docs[0]);
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.service_account_name.as_deref(), Some("tollgate"));
    let container = &pod.containers[0];
    let caps = container
        .security_context
        .as_ref()
        .unwrap()
        .capabilities
        .as_ref()
        .unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert_eq!(
        caps.add.as_deref(),
        Some(&["NET_ADMIN".to_string(), "NET_RAW".to_string()][..])
    );
    let env = container.env.as_ref().unwrap();
    let node = env.iter().find(|e| e.name == "NODE_NAME").unwrap();
    let field = node
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(field.field_path, "spec.nodeName");
    for (probe, check) in [
        (&container.startup_probe, "ready"),
        (&container.liveness_probe, "live"),
        (&container.readiness_probe, "ready"),
    ] {
        let exec = probe.as_ref().unwrap().exec.as_ref().unwrap();
        assert_eq!(
            exec.command.as_deref().unwrap(),
            ["tollgate", "status", "--check", check]
        );
    }
    assert!(container.resources.as_ref().unwrap().requests.is_some());
    let args = container.args.as_ref().unwrap();
    assert_eq!(args[..2], ["run", "--kubernetes"]);
    let mounts = container.volume_mounts.as_ref().unwrap();
    let modules = mounts
        .iter()
        .find(|m| m.mount_path == "/lib/modules")
        .unwrap();
    assert_eq!(modules.read_only, Some(true));
    assert!(mounts.iter().any(|m| m.mount_path == "/run/xtables.lock"));
    assert!(mounts.iter().any(|m| m.mount_path == "/run/tollgate"));
}

#[test]
fn cleanup_daemonset_runs_tollgate_cleanup_where_the_agent_ran() {
    let docs = documents("cleanup.yaml");
    assert_eq!(docs.len(), 1);
    let ds: DaemonSet = roundtrip(&docs[0]);
    let agent: DaemonSet = roundtrip(&documents("daemonset.yaml")[0]);
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let agent_pod = agent.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.host_network,
        Some(true),
        "the agent's network namespace"
    );
    assert_eq!(
        pod.tolerations, agent_pod.tolerations,
        "every node the agent ran on"
    );
    let init = &pod.init_containers.as_ref().unwrap()[0];
    let agent_container = &agent_pod.containers[0];
    assert_eq!(init.args.as_deref().unwrap(), ["cleanup"]);
    assert_eq!(init.image, agent_container.image);
    assert_eq!(init.security_context, agent_container.security_context);
    for mount in ["/run/xtables.lock", "/lib/modules"] {
        let find = |c: &k8s_openapi::api::core::v1::Container| {
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.mount_path == mount)
                .cloned()
        };
        assert_eq!(find(init), find(agent_container), "{mount}");
        assert!(find(init).is_some(), "{mount}");
    }
}
