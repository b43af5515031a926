//! pdsim's input documents: the Deployment and Scenario types, strict loading
//! with located problems, every check of the Deployment specification, the
//! engine-release rules packs, the built-in catalog, derived layouts and the
//! resolution of what would run.
//!
//! **Architecture invariant:** this crate does no I/O of its own. Files come
//! through the [`files::Files`] trait, so validation is a pure function of
//! its inputs.

mod builtin;
pub mod catalog;
pub mod coefficient_names;
pub mod deployment;
pub mod files;
pub mod layout;
pub mod lines;
pub mod llmd;
pub mod load;
pub mod model;
pub mod names;
pub mod problem;
pub mod quantity;
pub mod resolve;
pub mod rules;
pub mod scenario;
pub mod validate;

pub use problem::{Problem, Problems, Severity};
pub use validate::{Report, Request, validate};
