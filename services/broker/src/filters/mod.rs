//! Broker filters: the pipeline language alerts are filtered with, and the
//! preview that runs a pipeline over the archive.
//!
//! - [`pipeline`]: a documented subset of MongoDB's aggregation language
//!   (`$match`, `$project`, `$addFields`), compiled against the alert
//!   schema and the filter's stream, evaluated in Rust.
//! - [`preview`]: a pipeline over stored alerts, in a time window, a sky
//!   region (a MOC) and programmes: a count, or the top alerts by a field.

pub mod pipeline;
pub mod preview;
