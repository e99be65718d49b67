//! The Kubernetes manifests in `docker/` are valid objects: every document
//! deserializes into its k8s-openapi type and serializes back to the same
//! JSON (so no field is misspelt or misplaced: the types would drop it).
//! `docker/crds.yaml` is rendered from `manifests/crds.rs`; its schemas are
//! structural, and every example policy the project ships (rules/, docs/**,
//! README.md, the Antrea cases tollgate admits) passes them, while objects
//! Antrea refuses for a reason a schema can state are refused by them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

#[path = "manifests/controller.rs"]
mod controller;
#[path = "manifests/crds.rs"]
mod crds;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_documents(path: &Path, text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn documents(file: &str) -> Vec<Value> {
    let path = root().join("docker").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    yaml_documents(&path, &text)
}

/// Decodes `value` as `T` and checks nothing was lost on the way.
fn roundtrip<T: DeserializeOwned + Serialize>(value: &Value) -> T {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| {
        panic!("{e}: {value:#}");
    });
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        numbers_as_floats(&back),
        numbers_as_floats(value),
        "fields lost or changed in the typed form"
    );
    typed
}

/// `minimum: 1` and `minimum: 1.0` are one bound (k8s-openapi holds
/// schema bounds as f64).
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_floats).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_as_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
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
    let docs = documents("base/rbac.yaml");
    assert_eq!(docs.len(), 3);
    let account: ServiceAccount = roundtrip(&docs[0]);
    let role: ClusterRole = roundtrip(&docs[1]);
    let binding: ClusterRoleBinding = roundtrip(&docs[2]);
    let rules = role.rules.unwrap();
    let is_events = |r: &&k8s_openapi::api::rbac::v1::PolicyRule| {
        r.api_groups.as_deref().unwrap_or_default() == ["events.k8s.io"]
    };
    // Controller mode reads the controller's Lease, that one only.
    let is_lease = |r: &&k8s_openapi::api::rbac::v1::PolicyRule| {
        r.api_groups.as_deref().unwrap_or_default() == ["coordination.k8s.io"]
    };
    let lease: Vec<_> = rules.iter().filter(is_lease).collect();
    assert_eq!(lease.len(), 1);
    assert_eq!(
        lease[0].resources.as_deref().unwrap_or_default(),
        ["leases"]
    );
    assert_eq!(
        lease[0].resource_names.as_deref().unwrap_or_default(),
        [tollgate::source::kube::peers::LEASE_NAME]
    );
    assert_eq!(lease[0].verbs, ["get"]);
    for rule in rules.iter().filter(|r| !is_events(r) && !is_lease(r)) {
        assert_eq!(rule.verbs, ["list", "watch"]);
    }
    assert!(rules.iter().any(|r| {
        r.api_groups.as_deref().unwrap_or_default() == [tollgate::selection::group::GROUP]
            && r.resources.as_deref().unwrap_or_default() == [tollgate::selection::group::PLURAL]
    }));
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
    let docs = documents("base/daemonset.yaml");
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
    let docs = documents("cleanup/cleanup.yaml");
    assert_eq!(docs.len(), 1);
    let ds: DaemonSet = roundtrip(&docs[0]);
    let agent: DaemonSet = roundtrip(&documents("base/daemonset.yaml")[0]);
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
    assert_eq!(init.args.as_deref().unwrap(), ["cleanup", "--wait"]);
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

#[test]
fn crds_yaml_is_rendered_from_the_schemas() {
    let path = root().join("docker/crds.yaml");
    let rendered = crds::render();
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let file = std::fs::read_to_string(&path).unwrap();
    assert!(
        file == rendered,
        "docker/crds.yaml differs from tests/manifests/crds.rs: run `UPDATE_CRDS=1 cargo test --test manifests`"
    );
    // And the file reads back as the same objects.
    assert_eq!(yaml_documents(&path, &file), crds::definitions());
}

/// The rules of a structural schema (apiextensions.k8s.io/v1) that a
/// schema written by hand can break: every node says its type (or is
/// int-or-string, or keeps unknown fields), the logical junctors carry
/// value checks only (the int-or-string `anyOf` excepted), and
/// `properties` and `additionalProperties` are not mixed.
fn check_structural(schema: &Value, at: &str, problems: &mut Vec<String>) {
    let map = schema.as_object().unwrap();
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        let any = &map["anyOf"];
        if any != &serde_json::json!([{"type": "integer"}, {"type": "string"}])
            || map.contains_key("type")
        {
            problems.push(format!(
                "{at}: int-or-string needs exactly anyOf [integer, string] and no type"
            ));
        }
    } else if !map.contains_key("type") && !at.ends_with("/oneOf[]") {
        problems.push(format!("{at}: no type"));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        problems.push(format!("{at}: properties and additionalProperties"));
    }
    for junctor in ["oneOf", "anyOf", "allOf"] {
        if let Some(branches) = map.get(junctor) {
            for branch in branches.as_array().unwrap() {
                let allowed = [
                    "required", "format", "pattern", "minimum", "maximum", "enum",
                ];
                let bad: Vec<_> = branch
                    .as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| {
                        let typed_branch = int_or_string && k.as_str() == "type";
                        !allowed.contains(&k.as_str()) && !typed_branch
                    })
                    .collect();
                if !bad.is_empty() {
                    problems.push(format!("{at}/{junctor}: {bad:?} not allowed in a junctor"));
                }
            }
        }
    }
    if let Some(props) = map.get("properties") {
        for (name, sub) in props.as_object().unwrap() {
            check_structural(sub, &format!("{at}.{name}"), problems);
        }
    }
    if let Some(items) = map.get("items") {
        check_structural(items, &format!("{at}[]"), problems);
    }
    if let Some(Value::Object(_)) = map.get("additionalProperties") {
        check_structural(&map["additionalProperties"], &format!("{at}{{}}"), problems);
    }
}

fn open_api_schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

#[test]
fn crd_schemas_are_structural_and_typed_to_the_leaves() {
    let mut problems = Vec::new();
    for crd in documents("crds.yaml") {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let schema = open_api_schema(&crd);
        check_structural(schema, &kind, &mut problems);
        // No open object left where the kind's fields are known: only the
        // conditions Antrea's controller writes keep unknown fields.
        let text = serde_json::to_string(&schema["properties"]["spec"]).unwrap();
        assert!(
            !text.contains("x-kubernetes-preserve-unknown-fields"),
            "{kind}: spec is open"
        );
        assert_eq!(schema["properties"]["spec"]["type"], "object", "{kind}");
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn crd_short_names_clash_with_no_upstream_kind_and_columns_resolve() {
    // Short names of Kubernetes' built-in kinds and of the
    // network-policy-api CRDs (AdminNetworkPolicy `anp`, Baseline `banp`,
    // its ClusterNetworkPolicy `cnp`); `kubectl get netpol` must stay
    // Kubernetes' NetworkPolicy.
    let upstream = [
        "netpol", "anp", "banp", "cnp", "np", "po", "ns", "no", "svc", "sa", "ep", "ds", "deploy",
        "rs", "sts", "cm", "pv", "pvc", "ing", "crd", "crds", "ev", "limits", "quota", "hpa",
        "pdb", "psp", "sc", "csr", "rc", "cs",
    ];
    let mut seen = BTreeSet::new();
    for crd in documents("crds.yaml") {
        let names = &crd["spec"]["names"];
        for short in names["shortNames"].as_array().unwrap() {
            let short = short.as_str().unwrap();
            assert!(
                !upstream.contains(&short),
                "{short} is an upstream short name"
            );
            assert!(seen.insert(short.to_string()), "{short} twice");
        }
        let version = &crd["spec"]["versions"][0];
        let columns = version["additionalPrinterColumns"].as_array().unwrap();
        assert_eq!(columns.last().unwrap()["name"], "Age");
        // Every column's path is a field of the schema.
        for column in columns {
            let path = column["jsonPath"].as_str().unwrap();
            if path == ".metadata.creationTimestamp" {
                continue;
            }
            let mut node = open_api_schema(&crd);
            for part in path.trim_start_matches('.').split('.') {
                node = &node["properties"][part];
            }
            assert!(!node.is_null(), "{path} is not in the schema");
            assert_eq!(node["type"], column["type"], "{path}");
        }
        let kind = names["kind"].as_str().unwrap();
        if kind.ends_with("NetworkPolicy") {
            let names: Vec<_> = columns
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            assert_eq!(names, ["Tier", "Priority", "Age"], "{kind}");
        }
    }
}

/// The schema as a JSON Schema validator reads it, with the API server's
/// behaviour where the two differ: an object with `properties` refuses
/// other fields (kubectl's strict field validation, the default since
/// Kubernetes 1.27; the API server would prune them), and the root admits
/// `apiVersion`, `kind` and `metadata`.
fn as_json_schema(schema: &Value) -> Value {
    fn close(schema: &mut Value) {
        let Some(map) = schema.as_object_mut() else {
            return;
        };
        if map.contains_key("properties")
            && !map.contains_key("additionalProperties")
            && !map.contains_key("x-kubernetes-preserve-unknown-fields")
        {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
        for key in ["properties"] {
            if let Some(Value::Object(props)) = map.get_mut(key) {
                props.values_mut().for_each(close);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = map.get_mut(key) {
                close(sub);
            }
        }
    }
    let mut schema = schema.clone();
    close(&mut schema);
    let props = schema["properties"].as_object_mut().unwrap();
    props.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
    props.insert("kind".into(), serde_json::json!({"type": "string"}));
    props.insert("metadata".into(), serde_json::json!({"type": "object"}));
    schema
}

/// The API server drops `null` fields of a schema without `nullable`
/// before it validates; so does this.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// A validator per `apiVersion` and kind of docker/crds.yaml.
struct Schemas(Vec<(String, String, jsonschema::Validator)>);

impl Schemas {
    fn load() -> Self {
        let mut all = Vec::new();
        for crd in documents("crds.yaml") {
            let version = &crd["spec"]["versions"][0];
            let api_version = format!("crd.antrea.io/{}", version["name"].as_str().unwrap());
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
            let validator = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft4)
                .should_validate_formats(true)
                .with_format("cidr", |s: &str| s.parse::<ipnet::IpNet>().is_ok())
                .build(&as_json_schema(open_api_schema(&crd)))
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            all.push((api_version, kind, validator));
        }
        Schemas(all)
    }

    /// The schema's errors for `object`, or `None` when no CRD here
    /// defines its kind.
    fn errors(&self, object: &Value) -> Option<Vec<String>> {
        let (_, _, validator) = self
            .0
            .iter()
            .find(|(v, k, _)| object["apiVersion"] == v.as_str() && object["kind"] == k.as_str())?;
        let object = without_nulls(object);
        Some(
            validator
                .iter_errors(&object)
                .map(|e| format!("{}: {e}", e.instance_path()))
                .collect(),
        )
    }
}

/// Fenced ```yaml blocks of a Markdown file that hold Antrea objects.
fn markdown_objects(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut objects = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match &mut block {
            None if line.trim_start().starts_with("```yaml") => block = Some(String::new()),
            Some(body) if line.trim_start().starts_with("```") => {
                if body.contains("apiVersion: crd.antrea.io/") {
                    objects.extend(yaml_documents(path, body));
                }
                block = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    objects
}

/// Every `*.md` under `dir`, in its subdirectories too (docs/ is a book).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Every example object the project ships, with where it comes from.
fn shipped_examples() -> Vec<(String, Value)> {
    let mut all = Vec::new();
    let mut add = |origin: String, docs: Vec<Value>| {
        for doc in docs {
            // A List of objects (kubectl's form) counts item by item.
            if doc["kind"] == "List" {
                for item in doc["items"].as_array().unwrap() {
                    all.push((origin.clone(), item.clone()));
                }
            } else {
                all.push((origin.clone(), doc));
            }
        }
    };
    for dir in ["rules", "tests/data/spec", "tests/data/antrea-docs"] {
        for file in yaml_files(&root().join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            add(file.display().to_string(), yaml_documents(&file, &text));
        }
    }
    for name in ["docs-antrea-network-policy.yaml", "docs-other-pages.yaml"] {
        let file = root().join("tests/data/antrea").join(name);
        let text = std::fs::read_to_string(&file).unwrap();
        add(file.display().to_string(), yaml_documents(&file, &text));
    }
    let mut markdown = vec![root().join("README.md")];
    markdown_files(&root().join("docs"), &mut markdown);
    markdown.sort();
    for file in markdown {
        add(file.display().to_string(), markdown_objects(&file));
    }
    // The Antrea admission cases Antrea admits (webhook and e2e).
    let e2e = root().join("tests/data/antrea/e2e-cases.yaml");
    let text = std::fs::read_to_string(&e2e).unwrap();
    let cases: Vec<Value> = serde_saphyr::from_str(&text).unwrap();
    for case in cases.iter().filter(|c| c["admitted"] == true) {
        let name = case["name"].as_str().unwrap();
        add(
            format!("e2e case {name}"),
            case["objects"].as_array().unwrap().clone(),
        );
    }
    // `only-icmp-specified`: the conversion of Antrea's Go test wrote two
    // empty struct literals as `[]`, which no YAML author writes.
    for case in webhook_cases()
        .iter()
        .filter(|c| c["reason"] == "" && c["name"] != "only-icmp-specified")
    {
        let name = case["name"].as_str().unwrap();
        let docs = [&case["exist"], &case["object"]]
            .into_iter()
            .filter(|d| !d.is_null())
            .cloned()
            .collect();
        add(format!("webhook case {name}"), docs);
    }
    all
}

fn webhook_cases() -> Vec<Value> {
    let path = root().join("tests/data/antrea/webhook-cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Examples of Antrea's docs (and the spec, which copies them) that write
/// `action: Deny`: Antrea's schema refuses them, and so does tollgate
/// (with "did you mean Drop?", tests/spec_examples.rs).
const REFUSED_EXAMPLES: &[&str] = &[
    "allow-self-ns",
    "deny-self-ns-a-to-b",
    "isolation-based-on-org",
    "isolation-based-on-org-and-env",
];

#[test]
fn every_shipped_example_policy_passes_its_crd_schema() {
    let schemas = Schemas::load();
    let mut checked = BTreeSet::new();
    let mut failures = Vec::new();
    let mut count = 0;
    let mut refused = Vec::new();
    for (origin, object) in shipped_examples() {
        let Some(errors) = schemas.errors(&object) else {
            continue;
        };
        let name = object["metadata"]["name"].as_str().unwrap_or("?");
        if REFUSED_EXAMPLES.contains(&name) {
            assert!(
                !errors.is_empty() && errors.iter().all(|e| e.contains("\"Deny\"")),
                "{origin}: {name}: {errors:?}"
            );
            refused.push(name.to_string());
            continue;
        }
        count += 1;
        checked.insert(object["kind"].as_str().unwrap().to_string());
        if !errors.is_empty() {
            failures.push(format!(
                "{origin}: {} {name}: {}",
                object["kind"],
                errors.join("; ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every kind of the file is exercised by some example.
    let kinds: BTreeSet<String> = documents("crds.yaml")
        .iter()
        .map(|c| c["spec"]["names"]["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(checked, kinds);
    assert!(count >= 140, "only {count} examples found");
    // Each refused example is met twice: in the spec's copy and in
    // Antrea's docs.
    assert_eq!(refused.len(), 2 * REFUSED_EXAMPLES.len(), "{refused:?}");
}

/// A valid ClusterNetworkPolicy, changed by `edit` into one Antrea
/// refuses.
fn broken(edit: impl FnOnce(&mut Value)) -> Value {
    let mut policy = serde_json::json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "negative"},
        "spec": {
            "priority": 5,
            "tier": "application",
            "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
            "ingress": [{
                "action": "Allow",
                "from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                "ports": [{"protocol": "TCP", "port": 80}],
            }],
            "egress": [{"action": "Drop", "to": [{"fqdn": "*.example.com"}]}],
        },
    });
    edit(&mut policy);
    policy
}

/// Objects Antrea's CRD schema refuses that tollgate's validator admits
/// (in files; in Kubernetes mode the API server refuses them first).
const TOLLGATE_ADMITS: &[&str] = &["HTTP method get"];

#[test]
fn crd_schemas_refuse_what_antrea_refuses_where_a_schema_can_say_it() {
    let schemas = Schemas::load();
    let valid = broken(|_| {});
    assert_eq!(schemas.errors(&valid), Some(vec![]));
    let cases: Vec<(&str, Value)> = vec![
        (
            "action Deny",
            broken(|p| p["spec"]["ingress"][0]["action"] = "Deny".into()),
        ),
        (
            "no action",
            broken(|p| {
                p["spec"]["ingress"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("action");
            }),
        ),
        ("priority 0", broken(|p| p["spec"]["priority"] = 0.into())),
        (
            "priority 10001",
            broken(|p| p["spec"]["priority"] = 10001.into()),
        ),
        (
            "no priority",
            broken(|p| {
                p["spec"].as_object_mut().unwrap().remove("priority");
            }),
        ),
        (
            "port 0",
            broken(|p| p["spec"]["ingress"][0]["ports"][0]["port"] = 0.into()),
        ),
        (
            "port 65536",
            broken(|p| p["spec"]["ingress"][0]["ports"][0]["port"] = 65536.into()),
        ),
        (
            "upper-case port name",
            broken(|p| p["spec"]["ingress"][0]["ports"][0]["port"] = "HTTP".into()),
        ),
        (
            "endPort 70000",
            broken(|p| p["spec"]["ingress"][0]["ports"][0]["endPort"] = 70000.into()),
        ),
        (
            "protocol ICMP in ports",
            broken(|p| p["spec"]["ingress"][0]["ports"][0]["protocol"] = "ICMP".into()),
        ),
        (
            "lower-case protocol",
            broken(|p| p["spec"]["ingress"][0]["ports"][0]["protocol"] = "tcp".into()),
        ),
        (
            "cidr not a CIDR",
            broken(|p| {
                p["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"] = "10.0.0.300/8".into()
            }),
        ),
        (
            "ipBlock in appliedTo",
            broken(|p| {
                p["spec"]["appliedTo"][0]["ipBlock"] = serde_json::json!({"cidr": "10.0.0.0/8"})
            }),
        ),
        (
            "fqdn in an ingress peer",
            broken(|p| p["spec"]["ingress"][0]["from"][0]["fqdn"] = "a.example.com".into()),
        ),
        (
            "fqdn with a space",
            broken(|p| p["spec"]["egress"][0]["to"][0]["fqdn"] = "a b.com".into()),
        ),
        (
            "label value with a space",
            broken(|p| {
                p["spec"]["appliedTo"][0]["podSelector"]["matchLabels"]["app"] = "a b".into()
            }),
        ),
        (
            "selector operator",
            broken(|p| {
                p["spec"]["appliedTo"][0]["podSelector"] =
                    serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Equals"}]})
            }),
        ),
        (
            "icmpType 256",
            broken(|p| {
                p["spec"]["ingress"][0]["protocols"] =
                    serde_json::json!([{"icmp": {"icmpType": 256}}])
            }),
        ),
        (
            "icmp and igmp in one entry",
            broken(|p| {
                p["spec"]["ingress"][0]["protocols"] = serde_json::json!([{"icmp": {}, "igmp": {}}])
            }),
        ),
        (
            "IGMP report in ingress",
            broken(|p| {
                p["spec"]["ingress"][0]["protocols"] =
                    serde_json::json!([{"igmp": {"igmpType": 0x16}}])
            }),
        ),
        (
            "HTTP method get",
            broken(|p| {
                p["spec"]["ingress"][0]["l7Protocols"] =
                    serde_json::json!([{"http": {"method": "get"}}])
            }),
        ),
        (
            "logLabel with a slash",
            broken(|p| p["spec"]["ingress"][0]["logLabel"] = "a/b".into()),
        ),
        (
            "misspelt field",
            broken(|p| p["spec"]["ingress"][0]["port"] = serde_json::json!([{"port": 80}])),
        ),
        (
            "serviceAccount without namespace",
            broken(|p| {
                p["spec"]["appliedTo"][0] = serde_json::json!({"serviceAccount": {"name": "a"}})
            }),
        ),
        (
            "namespaces with match and sameLabels",
            broken(|p| {
                p["spec"]["ingress"][0]["from"][0] =
                    serde_json::json!({"namespaces": {"match": "Self", "sameLabels": ["a"]}})
            }),
        ),
    ];
    let mut admitted = Vec::new();
    let mut tollgate_admits = Vec::new();
    for (what, object) in &cases {
        let errors = schemas.errors(object).unwrap();
        if errors.is_empty() {
            admitted.push(*what);
        }
        // tollgate's own validator refuses them too: the schema never
        // stands alone in refusing.
        let decoded = tollgate::model::Object::from_value(object.clone());
        let refused = match decoded {
            Err(_) => true,
            Ok(o) => {
                let snapshot = tollgate::model::Snapshot {
                    objects: vec![tollgate::model::Sourced::new(
                        PathBuf::from("negative.yaml"),
                        o,
                    )],
                };
                !tollgate::validate::check(&snapshot).errors.is_empty()
            }
        };
        if !refused {
            tollgate_admits.push(*what);
        }
    }
    assert!(admitted.is_empty(), "the schemas admit: {admitted:?}");
    assert_eq!(
        tollgate_admits, TOLLGATE_ADMITS,
        "refused by the schema, admitted by tollgate"
    );
    // Tier priorities are 0-255, and a Tier needs one.
    let tier = |spec: Value| serde_json::json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": {"name": "t"}, "spec": spec});
    assert!(schemas
        .errors(&tier(serde_json::json!({"priority": 10})))
        .unwrap()
        .is_empty());
    assert!(!schemas
        .errors(&tier(serde_json::json!({"priority": 256})))
        .unwrap()
        .is_empty());
    assert!(!schemas
        .errors(&tier(serde_json::json!({})))
        .unwrap()
        .is_empty());
}

fn agent_pod() -> k8s_openapi::api::core::v1::PodSpec {
    let ds: DaemonSet = roundtrip(&documents("base/daemonset.yaml")[0]);
    ds.spec.unwrap().template.spec.unwrap()
}

#[test]
fn daemonset_runs_on_linux_under_the_default_seccomp_profile_with_its_configmap() {
    let ds: DaemonSet = roundtrip(&documents("base/daemonset.yaml")[0]);
    let template = ds.spec.unwrap().template;
    let pod = template.spec.unwrap();
    assert_eq!(
        pod.node_selector
            .unwrap()
            .get("kubernetes.io/os")
            .map(String::as_str),
        Some("linux")
    );
    let seccomp = pod.security_context.unwrap().seccomp_profile.unwrap();
    assert_eq!(seccomp.type_, "RuntimeDefault");
    let container = &pod.containers[0];
    let args = container.args.as_ref().unwrap();
    let config_path = &args[args.iter().position(|a| a == "--config").unwrap() + 1];

    // The ConfigMap is mounted where --config points, and reads as a
    // tollgate configuration.
    let config_map: ConfigMap = roundtrip(&documents("base/configmap.yaml")[0]);
    let volumes = pod.volumes.unwrap();
    let config_volume = volumes
        .iter()
        .find(|v| v.config_map.as_ref().map(|c| &c.name) == config_map.metadata.name.as_ref())
        .expect("a volume of the ConfigMap");
    let mounts = container.volume_mounts.as_ref().unwrap();
    let mount = mounts
        .iter()
        .find(|m| m.name == config_volume.name)
        .unwrap();
    assert_eq!(mount.read_only, Some(true));
    let key = Path::new(config_path)
        .strip_prefix(&mount.mount_path)
        .unwrap();
    let text = &config_map.data.unwrap()[key.to_str().unwrap()];
    let machine = tollgate::config::MachineDefaults {
        node_name: "node-1".into(),
        queues: 2,
    };
    let config =
        tollgate::config::AgentConfig::load(&machine, Some((Path::new(config_path), text)), &[])
            .unwrap()
            .config;

    // Metrics: the configured port is the container's port `metrics` and
    // the scrape annotations'.
    // Metrics on the node's address (the downward API's status.hostIP,
    // expanded by the kubelet).
    let address = &args[args.iter().position(|a| a == "--metrics-address").unwrap() + 1];
    let (host, metrics_port) = address.rsplit_once(':').unwrap();
    let node_ip = container
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| format!("$({})", e.name) == host)
        .unwrap();
    assert_eq!(
        node_ip
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "status.hostIP"
    );
    let metrics = std::net::SocketAddr::new([10, 0, 0, 1].into(), metrics_port.parse().unwrap());
    assert!(
        config.metrics.address.is_none(),
        "one place sets the metrics address"
    );
    let port = container
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .unwrap();
    assert_eq!(port.container_port, i32::from(metrics.port()));
    assert_eq!(port.host_port, Some(port.container_port), "host network");
    let annotations = template.metadata.unwrap().annotations.unwrap();
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(
        annotations["prometheus.io/port"],
        metrics.port().to_string()
    );

    // The audit log is written under a hostPath.
    let audit = config.audit.file.clone().expect("audit log on");
    let audit_mount = mounts
        .iter()
        .find(|m| audit.starts_with(&m.mount_path))
        .unwrap();
    let audit_volume = volumes.iter().find(|v| v.name == audit_mount.name).unwrap();
    assert_eq!(
        audit_volume.host_path.as_ref().unwrap().path,
        "/var/log/tollgate"
    );
    assert_ne!(audit_mount.read_only, Some(true));

    // The no-lock-out set: SSH, the kubelet and the API server, IPv4 and
    // IPv6, ahead of every policy, for the node's own traffic only: no
    // shipped entry exempts routed (Pod) traffic, and the plan puts none
    // of them on the FORWARD hook.
    for entry in &config.datapath.privileged {
        assert_eq!(
            entry.hooks,
            tollgate::config::NODE_HOOKS,
            "{entry} reaches beyond the node"
        );
    }
    let plan = tollgate::datapath::plan::desired(
        &config.datapath,
        &config.queue_numbers(),
        &tollgate::ruleset::Enforced::default(),
        &[],
    );
    for table in [&plan.v4, &plan.v6] {
        let forward = &table.chains["TOLLGATE-FORWARD"];
        assert!(
            !forward.iter().any(|r| r.contains("--dport")),
            "privileged rules on FORWARD: {forward:#?}"
        );
    }
    for port in [22, 10250, 6443] {
        for any in ["0.0.0.0/0", "::/0"] {
            assert!(
                config
                    .datapath
                    .privileged
                    .iter()
                    .any(|p| p.port == Some(port)
                        && p.cidr.to_string() == any
                        && p.protocol == Some(tollgate::config::PrivilegedProtocol::Tcp)),
                "no privileged entry for {any} tcp/{port}"
            );
        }
    }

    // Requests and a memory limit; no CPU limit (throttling delays verdicts).
    let resources = container.resources.as_ref().unwrap();
    let limits = resources.limits.as_ref().unwrap();
    assert!(limits.contains_key("memory") && !limits.contains_key("cpu"));
    let requests = resources.requests.as_ref().unwrap();
    assert!(requests.contains_key("memory") && requests.contains_key("cpu"));
}

/// `kubectl kustomize DIR` (kustomize's own load restrictions), as the
/// documents it renders; None when kubectl is missing outside CI.
#[allow(clippy::disallowed_methods)] // runs kubectl.
fn kustomize(dir: &Path) -> Option<Vec<Value>> {
    let out = match std::process::Command::new("kubectl")
        .args(["kustomize"])
        .arg(dir)
        .output()
    {
        Ok(out) => out,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: kubectl kustomize: {e}");
            return None;
        }
        Err(e) => panic!("kubectl kustomize: {e}"),
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(yaml_documents(dir, &String::from_utf8(out.stdout).unwrap()))
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    kinds.sort();
    kinds
}

/// Every image of every container (init containers too).
fn images(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .filter(|d| d["kind"] == "DaemonSet")
        .flat_map(|d| {
            let spec = &d["spec"]["template"]["spec"];
            ["containers", "initContainers"]
                .iter()
                .flat_map(|k| spec[*k].as_array().cloned().unwrap_or_default())
                .map(|c| c["image"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `kubectl apply -k docker/` installs the CRDs and the base,
/// `docker/base` the same without a CRD (clusters that run Antrea),
/// `docker/cleanup` the cleanup; every manifest of docker/ is in one of
/// them; an image set in `docker/image` reaches the agent and the cleanup.
///
/// Mutation: the cleanup kustomization without the image component — the
/// overridden image does not reach it and the test fails.
#[test]
fn kustomizations_build_with_and_without_crds_and_the_image_reaches_the_cleanup() {
    let docker = root().join("docker");
    let Some(all) = kustomize(&docker) else {
        return;
    };
    let base = kustomize(&docker.join("base")).unwrap();
    let cleanup = kustomize(&docker.join("cleanup")).unwrap();
    let mut manifests: Vec<Value> = Vec::new();
    for file in [
        "crds.yaml",
        "base/rbac.yaml",
        "base/configmap.yaml",
        "base/daemonset.yaml",
    ] {
        manifests.extend(documents(file));
    }
    assert_eq!(kinds(&all), kinds(&manifests));
    assert!(kinds(&base)
        .iter()
        .all(|k| !k.starts_with("CustomResourceDefinition/")));
    assert_eq!(
        kinds(&base),
        kinds(&all)
            .into_iter()
            .filter(|k| !k.starts_with("CustomResourceDefinition/"))
            .collect::<Vec<_>>()
    );
    assert_eq!(kinds(&cleanup), ["DaemonSet/tollgate-cleanup"]);
    assert_eq!(
        images(&all),
        [agent_pod().containers[0].image.clone().unwrap()]
    );

    // An image set once, in the component, reaches every container.
    let copy = tempfile::tempdir().unwrap();
    for file in [
        "crds.yaml",
        "kustomization.yaml",
        "base/kustomization.yaml",
        "base/rbac.yaml",
        "base/configmap.yaml",
        "base/daemonset.yaml",
        "cleanup/kustomization.yaml",
        "cleanup/cleanup.yaml",
    ] {
        let to = copy.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(docker.join(file), to).unwrap();
    }
    std::fs::create_dir_all(copy.path().join("image")).unwrap();
    std::fs::write(
        copy.path().join("image/kustomization.yaml"),
        std::fs::read_to_string(docker.join("image/kustomization.yaml"))
            .unwrap()
            .replace(
                "newTag: dev",
                "newName: registry.example/tollgate\n    newTag: \"0.2\"",
            ),
    )
    .unwrap();
    let wanted = "registry.example/tollgate:0.2";
    for dir in ["", "base", "cleanup"] {
        let images = images(&kustomize(&copy.path().join(dir)).unwrap());
        assert!(!images.is_empty());
        assert!(images.iter().all(|i| i == wanted), "{dir}: {images:?}");
    }
}

/// The Docker host's two ways to start the image read the directory the
/// walkthrough (docs/guide/docker.md, step 3) writes the policies to.
/// Mutation: compose.yaml's default back to `./policies` fails it.
#[test]
fn compose_and_run_read_the_policy_directory_the_walkthrough_writes() {
    let dir = "/etc/tollgate/policies";
    let text = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
    assert!(text("docs/guide/docker.md").contains(&format!("Write the policies to `{dir}/`")));
    assert!(text("docker/run.sh").contains(&format!("POLICIES=${{POLICIES:-{dir}}}")));
    let compose = &documents("compose.yaml")[0];
    let volumes = compose["services"]["tollgate"]["volumes"]
        .as_array()
        .unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v.as_str() == Some(&format!("${{TOLLGATE_POLICIES:-{dir}}}:{dir}:ro"))),
        "{volumes:?}"
    );
}

/// Value checks `docker/crds.yaml` adds to Antrea's schemas: (check, field
/// path suffix, why Antrea refuses such a value anyway, in its webhook or
/// Kubernetes' own validation; `crd_schemas_refuse_what_antrea_refuses_…`
/// holds the cases).
const STRICTER: &[(&str, &str, &str)] = &[
    (
        "required key, operator",
        "matchExpressions[]",
        "a label selector requirement needs both (Kubernetes' LabelSelector validation)",
    ),
    (
        "maxLength",
        "matchExpressions[].values[]",
        "label values are at most 63 characters",
    ),
    (
        "pattern",
        "matchExpressions[].values[]",
        "label value syntax",
    ),
    ("type", "matchLabels", "label values are strings"),
    (
        "required cidr",
        "ipBlock",
        "validateIPBlock: \"field 'cidr' is required in an ipBlock\"",
    ),
    ("required cidr", "ipBlocks[]", "validateIPBlock"),
    (
        "required name, namespace",
        "serviceReference",
        "a ServiceReference names a Service in a Namespace",
    ),
    (
        "pattern",
        "ports[].port",
        "a named port is an IANA service name",
    ),
    (
        "maxLength",
        "ports[].port",
        "a named port is at most 15 characters",
    ),
    (
        "anyOf",
        "ports[].port",
        "int-or-string, stated as JSON Schema",
    ),
    ("minimum", "port", "ports are 1-65535"),
    ("maximum", "port", "ports are 1-65535"),
    ("minimum", "Port", "ports are 1-65535"),
    ("maximum", "Port", "ports are 1-65535"),
    ("pattern", "fqdn", "validateFQDNSelectors: allowedFQDNChars"),
    ("maxLength", "fqdn", "a DNS name is at most 253 characters"),
    (
        "pattern",
        "ports[].name",
        "a port name is an IANA service name",
    ),
    (
        "maxLength",
        "ports[].name",
        "a port name is at most 15 characters",
    ),
    ("minimum", "ports[].port", "ports are 1-65535"),
    ("maximum", "ports[].port", "ports are 1-65535"),
    (
        "format",
        "status.observedGeneration",
        "written by Antrea's controller, an int64",
    ),
    (
        "format",
        "status.currentNodesRealized",
        "written by Antrea's controller, an int32",
    ),
    (
        "format",
        "status.desiredNodesRealized",
        "written by Antrea's controller, an int32",
    ),
];

/// Names `docker/crds.yaml` gives differently: (CRD, names key, why).
const NAMES_DIFFER: &[(&str, &str, &str)] = &[(
    "networkpolicies.crd.antrea.io",
    "shortNames",
    "`anp` is also AdminNetworkPolicy's short name (network-policy-api), which tollgate reads too; a cluster with Antrea applies docker/base and keeps Antrea's CRDs",
)];

/// One definition's facts, as `tests/data/antrea-crds/inventory.py` writes
/// them: (version, field path) → fact → value (a flag is `true`); the
/// definition's own facts are at `("-", "-")`, a version's at `(v, "-")`.
type Facts = BTreeMap<(String, String), BTreeMap<String, Value>>;

/// The schema keywords the inventory keeps (`CHECKS` in inventory.py).
const SCHEMA_FACTS: &[&str] = &[
    "type",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "minItems",
    "maxItems",
    "format",
    "anyOf",
    "oneOf",
    "additionalProperties",
];

fn schema_facts(schema: &Value, path: &str, required: bool, v: &str, out: &mut Facts) {
    let mut facts: BTreeMap<String, Value> = SCHEMA_FACTS
        .iter()
        .filter_map(|k| Some((k.to_string(), schema.get(*k)?.clone())))
        .collect();
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        facts.insert("preserve-unknown-fields".into(), Value::Bool(true));
    }
    if required {
        facts.insert("required".into(), Value::Bool(true));
    }
    out.insert((v.into(), path.into()), facts);
    let child = |name: &str| match path {
        "." => name.to_string(),
        _ => format!("{path}.{name}"),
    };
    let names: Vec<&str> = schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, sub) in properties.into_iter().flatten() {
        schema_facts(sub, &child(name), names.contains(&name.as_str()), v, out);
    }
    for name in names {
        if properties.is_none_or(|p| !p.contains_key(name)) {
            let facts = BTreeMap::from([("required".to_string(), Value::Bool(true))]);
            out.insert((v.into(), child(name)), facts);
        }
    }
    if let Some(items) = schema.get("items") {
        schema_facts(items, &format!("{path}[]"), false, v, out);
    }
}

/// A CustomResourceDefinition's facts, as inventory.py derives them.
fn crd_facts(crd: &Value) -> Facts {
    let spec = &crd["spec"];
    let mut own = BTreeMap::from([
        ("name".to_string(), crd["metadata"]["name"].clone()),
        ("group".to_string(), spec["group"].clone()),
        ("scope".to_string(), spec["scope"].clone()),
    ]);
    for (key, value) in spec["names"].as_object().unwrap() {
        own.insert(format!("names.{key}"), value.clone());
    }
    let mut out = Facts::from([(("-".into(), "-".into()), own)]);
    for version in spec["versions"].as_array().unwrap() {
        let v = version["name"].as_str().unwrap();
        let served = BTreeMap::from([
            ("served".to_string(), version["served"].clone()),
            ("storage".to_string(), version["storage"].clone()),
        ]);
        out.insert((v.into(), "-".into()), served);
        schema_facts(
            &version["schema"]["openAPIV3Schema"],
            ".",
            false,
            v,
            &mut out,
        );
    }
    out
}

/// `tests/data/antrea-crds/fields.txt`: each kind's facts.
fn antrea_facts() -> BTreeMap<String, Facts> {
    let path = root().join("tests/data/antrea-crds/fields.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut kinds: BTreeMap<String, Facts> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let [kind, version, at, facts @ ..] = &line.split('\t').collect::<Vec<_>>()[..] else {
            panic!("{}: {line}", path.display());
        };
        let facts = facts
            .iter()
            .map(|fact| match fact.split_once('=') {
                Some((key, value)) => (
                    key.to_string(),
                    serde_json::from_str(value)
                        .unwrap_or_else(|e| panic!("{}: {line}: {e}", path.display())),
                ),
                None => (fact.to_string(), Value::Bool(true)),
            })
            .collect();
        kinds
            .entry(kind.to_string())
            .or_default()
            .insert((version.to_string(), at.to_string()), facts);
    }
    kinds
}

/// The path holding `path` (`.` the root, `a[]` the items of `a`).
fn parent(path: &str) -> Option<&str> {
    match path {
        "." => None,
        _ => Some(match path.strip_suffix("[]") {
            Some(array) => array,
            None => path.rsplit_once('.').map_or(".", |(up, _)| up),
        }),
    }
}

/// Where `ours` accepts less than `antrea` in version `v`, as (check, path).
fn narrower(antrea: &Facts, ours: &Facts, v: &str) -> Vec<(String, String)> {
    let get = |facts: &'_ Facts, at: &str| facts.get(&(v.to_string(), at.to_string())).cloned();
    let flag = |facts: Option<&BTreeMap<String, Value>>, key: &str| {
        facts.and_then(|f| f.get(key)) == Some(&Value::Bool(true))
    };
    // Below a node of ours that preserves unknown fields nothing is pruned or checked.
    let preserved = |at: &str| {
        std::iter::successors(Some(at), |p| parent(p))
            .any(|p| flag(get(ours, p).as_ref(), "preserve-unknown-fields"))
    };
    let mut out = Vec::new();
    let fields = |facts: &'_ Facts| {
        facts
            .keys()
            .filter(|(version, at)| version == v && at != "-")
            .map(|(_, at)| at.clone())
            .collect::<Vec<_>>()
    };
    for at in fields(antrea) {
        if preserved(&at) {
            continue;
        }
        let a = get(antrea, &at).unwrap();
        let Some(o) = get(ours, &at) else {
            // Only the outermost missing field is named.
            if parent(&at).is_none_or(|up| get(ours, up).is_some()) {
                out.push(("missing: the API server would prune it".into(), at));
            }
            continue;
        };
        let mut say = |check: &str| out.push((check.to_string(), at.clone()));
        // A map (`additionalProperties`) keeps its keys as preserving would.
        if flag(Some(&a), "preserve-unknown-fields") && !o.contains_key("additionalProperties") {
            say("prunes unknown fields");
        }
        if a.get("type") != o.get("type") {
            say("type");
        }
        let set = |facts: &BTreeMap<String, Value>| -> BTreeSet<String> {
            facts
                .get("enum")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|x| x.to_string()).collect())
                .unwrap_or_default()
        };
        if o.contains_key("enum") && (!a.contains_key("enum") || !set(&a).is_subset(&set(&o))) {
            say("enum");
        }
        let value_checks = SCHEMA_FACTS
            .iter()
            .filter(|k| !matches!(**k, "type" | "enum" | "additionalProperties"));
        for check in value_checks {
            if let Some(mine) = o.get(*check) {
                let theirs = a.get(*check).unwrap_or(&Value::Null);
                if numbers_as_floats(mine) != numbers_as_floats(theirs) {
                    say(check);
                }
            }
        }
    }
    // Fields ours requires that Antrea does not, named at the object holding them.
    let mut required: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for at in fields(ours) {
        let up = parent(&at).unwrap_or(".");
        if at == "."
            || !flag(get(ours, &at).as_ref(), "required")
            || flag(get(antrea, &at).as_ref(), "required")
            || get(antrea, up).is_none()
            || preserved(up)
        {
            continue;
        }
        let name = at.strip_prefix(&format!("{up}.")).unwrap_or(&at);
        required
            .entry(up.to_string())
            .or_default()
            .insert(name.to_string());
    }
    for (at, names) in required {
        let names: Vec<String> = names.into_iter().collect();
        out.push((format!("required {}", names.join(", ")), at));
    }
    out
}

/// `docker/crds.yaml` applied over Antrea's own CRDs changes nothing
/// Antrea's API accepts: same group, scope and names, every version
/// Antrea serves, every field Antrea defines (none pruned), nothing more
/// required, no enum narrower, and a value check beyond Antrea's only where
/// [`STRICTER`] says why Antrea refuses the value anyway. Antrea's side is
/// `tests/data/antrea-crds/fields.txt`, facts derived from its published
/// CRDs (the README there names the commit and the script); ours is derived
/// the same way from `docker/crds.yaml`.
///
/// Mutation: `toServices[].scope` left out of the schema (as it was) or
/// `namespace` required in the namespaced NetworkPolicy's `toServices`
/// (as it was) — the test names the field.
#[test]
fn crds_accept_what_antreas_crds_accept_field_by_field() {
    let ours: Vec<Value> = documents("crds.yaml");
    let mut problems = Vec::new();
    let mut compared = 0;
    for (kind, antrea) in antrea_facts() {
        let own = &antrea[&("-".to_string(), "-".to_string())];
        let name = own["name"].as_str().unwrap();
        let mine = crd_facts(
            ours.iter()
                .find(|c| c["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{name}: not in crds.yaml")),
        );
        let mine_own = &mine[&("-".to_string(), "-".to_string())];
        for key in ["group", "scope"] {
            if mine_own.get(key) != own.get(key) {
                problems.push(format!("{name}: spec.{key}"));
            }
        }
        // The API server's defaults for what a definition leaves out.
        let names = |facts: &BTreeMap<String, Value>, key: &str| match (
            facts.get(&format!("names.{key}")),
            key,
        ) {
            (None, "listKind") => json!(format!("{kind}List")),
            (None, "singular") => json!(kind.to_lowercase()),
            (value, _) => value.cloned().unwrap_or(Value::Null),
        };
        for key in [
            "kind",
            "plural",
            "singular",
            "listKind",
            "shortNames",
            "categories",
        ] {
            let explained = NAMES_DIFFER
                .iter()
                .any(|(crd, k, _)| *crd == name && *k == key);
            if names(mine_own, key) != names(own, key) && !explained {
                problems.push(format!(
                    "{name}: names.{key} {} (Antrea: {})",
                    names(mine_own, key),
                    names(own, key)
                ));
            }
        }
        for ((v, at), version) in &antrea {
            if v == "-" || at != "-" {
                continue;
            }
            let Some(served) = mine.get(&(v.clone(), "-".to_string())) else {
                problems.push(format!("{name} {v}: version not served"));
                continue;
            };
            for key in ["served", "storage"] {
                if served.get(key) != version.get(key) {
                    problems.push(format!("{name} {v}: {key}"));
                }
            }
            compared += 1;
            for (check, at) in narrower(&antrea, &mine, v) {
                let explained = STRICTER
                    .iter()
                    .any(|(c, suffix, _)| *c == check && at.ends_with(suffix));
                if !explained {
                    problems.push(format!("{name} {v}: {at}: {check}"));
                }
            }
        }
    }
    assert_eq!(compared, 6, "one version of each of the six kinds");
    assert!(
        problems.is_empty(),
        "narrower than Antrea's:\n{}",
        problems.join("\n")
    );
}
