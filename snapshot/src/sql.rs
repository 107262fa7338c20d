//! Quoting and PostgreSQL error descriptions: walfill's shared helpers
//! ([`walfill_core::sql`]), re-exported for the snapshot code.

pub use walfill_core::sql::{
    describe_pg_error, error_chain, ident_list, quote_ident, quote_literal, quote_qualified,
};
