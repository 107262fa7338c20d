//! Whether a table's rows may be copied in binary.
//!
//! Binary COPY carries each value in its type's send form, which the
//! destination's receive function reads back. That is exact between any two
//! servers of the supported versions for the built-in types, but a few
//! send forms name types by OID (arrays name their element type, composite
//! values each field's type), and a user-defined type's OID differs from
//! one database to another. So a column travels in binary only when its
//! type, seen through its domains, is
//! - a built-in base, range or multirange type whose array elements (if
//!   any) are built-in non-composite types, or
//! - an enum (sent as its label);
//!
//! and both databases store text as UTF-8 (binary text is sent in the
//! server's encoding, unconverted). Everything else is copied in text, as
//! before: each value printed by its output function and parsed by its
//! input function.

use tokio_postgres::GenericClient;

use crate::error::SnapshotError;
use crate::table::SourceTable;

/// The first OID PostgreSQL gives to objects created after `initdb`.
const FIRST_NORMAL_OID: u32 = 16384;

/// The copied columns of `table` whose values cannot travel in binary,
/// with their types, as the source's catalog says (empty: all can).
pub async fn binary_unsafe_columns(
    source: &impl GenericClient,
    table: &SourceTable,
) -> Result<Vec<String>, SnapshotError> {
    let columns: Vec<&crate::table::TableColumn> = table.replicated_columns().collect();
    let oids: Vec<u32> = columns.iter().map(|c| c.type_oid).collect();
    let rows = source
        .query(
            "WITH RECURSIVE chain(col, oid, depth) AS (
                 SELECT u.col, u.oid, 0 FROM unnest($1::oid[]) WITH ORDINALITY AS u(oid, col)
                 UNION ALL
                 SELECT c.col, t.typbasetype, c.depth + 1
                   FROM chain c JOIN pg_type t ON t.oid = c.oid
                  WHERE t.typtype = 'd' AND c.depth < 32
             ), base AS (
                 SELECT DISTINCT ON (c.col) c.col, t.oid, t.typtype::text, t.typelem,
                        t.typsend::oid <> 0 AND t.typreceive::oid <> 0 AS sends,
                        t.typsubscript = 'array_subscript_handler'::regproc AS is_array
                   FROM chain c JOIN pg_type t ON t.oid = c.oid
                  ORDER BY c.col, c.depth DESC
             )
             SELECT b.col::int, b.oid, b.typtype, b.sends, b.is_array,
                    e.oid, e.typtype::text
               FROM base b LEFT JOIN pg_type e ON e.oid = b.typelem AND b.typelem <> 0
              ORDER BY b.col",
            &[&oids],
        )
        .await
        .map_err(|e| SnapshotError::query("reading the source columns' types", e))?;
    let mut unsafe_columns = Vec::new();
    for row in rows {
        let col: i32 = row.get(0);
        let base: u32 = row.get(1);
        let kind: String = row.get(2);
        let sends: bool = row.get(3);
        let is_array: bool = row.get(4);
        let element: Option<u32> = row.get(5);
        let element_kind: Option<String> = row.get(6);
        let portable = sends
            && match kind.as_str() {
                "e" => true,
                "b" | "r" | "m" if base < FIRST_NORMAL_OID => match (is_array, element) {
                    (true, Some(element)) => {
                        element < FIRST_NORMAL_OID
                            && matches!(element_kind.as_deref(), Some("b" | "r" | "m"))
                    }
                    (true, None) => false,
                    (false, _) => true,
                },
                _ => false,
            };
        if !portable {
            if let Some(column) = usize::try_from(col - 1).ok().and_then(|i| columns.get(i)) {
                unsafe_columns.push(format!("{} ({})", column.name, column.sql_type));
            }
        }
    }
    Ok(unsafe_columns)
}

/// Whether a server's `server_encoding` lets text travel in binary.
pub fn encoding_allows_binary(server_encoding: &str) -> bool {
    server_encoding.eq_ignore_ascii_case("UTF8")
}
