//! Where policies and inventory come from: [`files`] reads a directory of
//! YAML/JSON documents (the standalone default) and [`watch`] wakes the
//! agent when it changes; [`kube`] lists and watches the Kubernetes API.
//! Sources decode objects into a [`crate::model::Snapshot`]; they never
//! judge them (that is [`crate::validate`]'s job) and never touch the
//! kernel.

pub mod files;
pub mod kube;
pub mod watch;

pub use files::{load_and_validate, load_paths, parse_documents, SourceError};
