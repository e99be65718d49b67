//! The root network-namespace suite, one test binary (`cargo test --test
//! netns`, as root): every test builds its own throw-away namespaces with
//! [`harness::Lab`], runs `tollgate` or its datapath inside them and
//! observes verdicts on the wire. Not root: every test reports `SKIPPED:`
//! and returns, except under `CI=true`, where it fails.

mod harness;

mod bypass;
mod datapath;
mod faults;
mod fqdn;
mod kernel;
mod kube;
mod l7;
mod observe;
mod overload;
mod queue;
mod run;
