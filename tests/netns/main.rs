//! The root network-namespace suite in one test binary (`cargo test --test
//! netns`, as root): each test builds throw-away namespaces with
//! [`harness::Lab`] and observes tollgate's verdicts on the wire. Not root:
//! each prints `SKIPPED:` and returns, except under `CI=true`, where it fails.

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
