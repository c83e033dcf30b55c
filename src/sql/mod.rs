//! Plans: parsing our dialect, planning through DataFusion, one handler per statement.

pub mod approx_percentile;
pub mod asof;
pub mod changelog;
pub mod colnames;
pub mod conflict;
pub mod constants;
pub mod datetime;
pub mod functions;
pub mod gap_fill;
pub mod grouping_sets;
pub mod interval_arith;
pub mod keyaccess;
pub mod lookup;
pub mod make_time;
pub mod parser;
pub mod percentile;
pub mod pg_catalog;
pub mod plan;
pub mod provider;
pub mod rounding;
pub mod rules;
pub mod template;
pub mod temporal;
pub mod text;
pub mod window;
pub mod write;
