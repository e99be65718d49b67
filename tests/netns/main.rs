//! The root network-namespace suite in one test binary (`cargo test --test
//! netns`, as root): each test builds throw-away namespaces with
//! [`harness::Lab`] and observes tollgate's verdicts on the wire. Not root:
//! each prints `SKIPPED:` and returns, except under `CI=true`, where it fails.
#![allow(unsafe_code)] // the harness enters namespaces (setns) and signals processes.
#![allow(clippy::disallowed_methods)] // tests drive processes and wait on the clock.

mod harness;

mod bypass;
mod cache;
mod datapath;
mod demo;
mod docker;
mod dockerd;
mod dockerfw;
mod dryrun;
mod faults;
mod files;
mod forgery;
mod fqdn;
mod health;
mod icmp;
pub(crate) mod image;
mod kernel;
mod kube;
mod kube_controller;
mod l7;
mod l7restart;
mod lifecycle;
mod normalise;
mod npapi;
mod observe;
mod ops;
mod overload;
mod parity;
mod privileged;
mod queue;
mod resolve;
mod review;
mod run;
mod setwrites;
mod smuggle;
mod spoof;
mod visibility;
mod warnings;
