//! The fake API server's own parsing: selectors and object paths.

use super::*;

#[test]
fn selectors_read_as_the_api_server_reads_them() {
    let group = json!({"metadata": {"name": "k1-0", "labels": {"tollgate.io/selection": "k1"}}});
    let pod =
        json!({"metadata": {"name": "p", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}});
    // What kube's client sends, form-encoded.
    let labels = decode("tollgate.io%2Fselection+in+%28k0%2Ck1%29");
    assert_eq!(labels, "tollgate.io/selection in (k0,k1)");
    assert!(selected(&group, &labels, ""));
    assert!(!selected(&group, "tollgate.io/selection in (k0,k2)", ""));
    assert!(selected(&group, "tollgate.io/selection notin (k0,k2)", ""));
    assert!(selected(&pod, "app=web,!tier", "spec.nodeName=n1"));
    assert!(!selected(&pod, "app!=web", ""));
    assert!(!selected(&pod, "", &decode("spec.nodeName%3Dn2")));
    assert!(selected(&pod, "app", "metadata.name==p"));
}

#[test]
fn one_object_is_told_from_a_collection() {
    assert!(names_an_object(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tollgate-controller"
    ));
    assert!(names_an_object(
        "/apis/tollgate.io/v1alpha1/addressgroups/k-0"
    ));
    assert!(names_an_object("/api/v1/namespaces/default"));
    assert!(!names_an_object("/api/v1/pods"));
    assert!(!names_an_object("/apis/tollgate.io/v1alpha1/addressgroups"));
    let key = (
        collection("coordination.k8s.io/v1", "Lease"),
        "kube-system".to_string(),
        "tollgate-controller".to_string(),
    );
    assert_eq!(
        object_path(&key),
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tollgate-controller"
    );
}
