//! One file per operator.

pub mod aggregate;
pub mod filter;
pub mod materialize;
pub mod project;
pub mod union;

pub use aggregate::Aggregate;
pub use filter::Filter;
pub use materialize::Materialize;
pub use project::Project;
pub use union::Union;
