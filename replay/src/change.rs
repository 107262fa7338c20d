//! Committed row changes: what every history source produces. The types are
//! walfill's shared vocabulary ([`walfill_core`]); they are re-exported here
//! for the decoder's own use.

pub use walfill_core::change::{Datum, RowChange, Transaction, TxnVersions, Version};
pub use walfill_core::relation::{Column, Relation};
