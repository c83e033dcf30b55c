//! One file per operator.

pub mod aggregate;
pub mod changelog;
pub mod filter;
pub mod hold;
pub mod join;
pub mod lookup;
pub mod materialize;
pub mod over;
pub mod project;
pub mod rank;
pub mod session;
pub mod sliding;
pub mod union;
pub mod unnest;
pub mod window;

/// The hash map of operators' per-row paths: ahash, seeded at random as
/// SipHash is, at a fraction of its cost on short keys.
pub type FastMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

pub use aggregate::Aggregate;
pub use filter::Filter;
pub use hold::Hold;
pub use materialize::Materialize;
pub use project::Project;
pub use session::SessionAssign;
pub use union::Union;
pub use unnest::Unnest;
pub use window::WindowAssign;
