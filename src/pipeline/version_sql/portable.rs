//! Whether a transform gives the same values wherever it runs.
//!
//! The transform is defined in the destination, and the live stream and
//! replays evaluate it there. A snapshot copy may evaluate it on the source
//! instead, and COPY finished rows straight into the version (see
//! `crate::pipeline::source::evaluate`), only when that cannot change a value. The
//! half of the proof that depends on the transform alone is made here, from
//! the query tree the destination stored for it:
//!
//! - every node is one of a small set of plain expressions (columns,
//!   constants, function and operator calls, `CASE`, `COALESCE`, boolean
//!   tests...): no cast through text (which runs type output functions that
//!   read settings), no `current_date`, no sequence, no domain check;
//! - every function is a built-in one of `pg_catalog`, immutable, not a
//!   type's input or output function, and not a float function of the
//!   platform's math library (which may differ in the last bit between
//!   servers of the same version); or one of a few stable ones that read
//!   nothing but `TimeZone`, which every walfill session pins to UTC;
//!   `timezone(text, ...)` is left out, as named zones come from each
//!   server's own time zone data;
//! - every type is built in, and none names catalog objects by OID
//!   (`regclass`, `regconfig`...), which differ between clusters;
//! - every collation is the database default, `C` or `POSIX`, or one the
//!   destination matched to a source column's own by what it is (see
//!   `collation`): the transform's text names none (an explicit `COLLATE`
//!   is no plain expression), so on the source it is the column's own.
//!
//! (System columns are refused as a problem of their own, see `check`.)
//!
//! The other half (the same server version, encoding and collations on
//! both sides) is checked when a copy starts.

use tokio_postgres::Client;

use super::{Collations, Mapping};
use crate::error::{Error, Result};

/// The first object id `initdb` does not assign: built-in objects are below.
const FIRST_NORMAL_OID: u32 = 16384;

/// Nodes a portable transform's query tree may hold.
const PLAIN_NODES: &[&str] = &[
    "QUERY",
    "RANGETBLENTRY",
    "RTEPERMISSIONINFO",
    "ALIAS",
    "FROMEXPR",
    "RANGETBLREF",
    "TARGETENTRY",
    "VAR",
    "CONST",
    "FUNCEXPR",
    "OPEXPR",
    "DISTINCTEXPR",
    "NULLIFEXPR",
    "SCALARARRAYOPEXPR",
    "BOOLEXPR",
    "RELABELTYPE",
    "CASEEXPR",
    "CASEWHEN",
    "CASETESTEXPR",
    "COALESCEEXPR",
    "MINMAXEXPR",
    "NULLTEST",
    "BOOLEANTEST",
    "ARRAYEXPR",
];

/// Types whose values are catalog object ids.
const OID_TYPES: &[u32] = &[
    24, 26, 2202, 2203, 2204, 2205, 2206, 3734, 3769, 4089, 4096, 4191,
];

/// Stable built-in functions whose only dependency is `TimeZone`.
const TIME_ZONE_ONLY: &[&str] = &[
    "date_trunc(text,timestamp with time zone)",
    "date_part(text,timestamp with time zone)",
    "extract(text,timestamp with time zone)",
    "timestamp(timestamp with time zone)",
    "date(timestamp with time zone)",
    "timestamptz(timestamp without time zone)",
    "timestamptz(date)",
    "timestamptz_pl_interval(timestamp with time zone,interval)",
    "timestamptz_mi_interval(timestamp with time zone,interval)",
];

/// Built-in float functions computed by the platform's math library
/// (`exp`, `ln`, `power`, trigonometry, `cbrt`...), by their internal
/// names: two servers of the same version on other C libraries may differ
/// in the last bit. (`sqrt` is correctly rounded everywhere; numeric
/// functions are PostgreSQL's own code.)
const LIBM: &[&str] = &[
    "dexp", "dlog1", "dlog10", "dpow", "dcbrt", "dsin", "dcos", "dtan", "dcot", "dasin", "dacos",
    "datan", "datan2", "dsind", "dcosd", "dtand", "dcotd", "dasind", "dacosd", "datand", "datan2d",
    "dsinh", "dcosh", "dtanh", "dasinh", "dacosh", "datanh", "derf", "derfc", "dgamma", "dlgamma",
];

/// Collations that are the same wherever the database's default is:
/// `default`, `C` and `POSIX`.
const PLAIN_COLLATIONS: &[u32] = &[0, 100, 950, 951];

/// Why the transform whose stored query tree is `tree` (checked in the
/// destination session `dest`) might give another value on the source than
/// in the destination; `None` when it cannot, given the same server and
/// collations on both sides.
pub(super) async fn not_portable(
    dest: &Client,
    tree: &str,
    collations: &Collations,
) -> Result<Option<String>> {
    if let Some(node) = nodes(tree).find(|n| !PLAIN_NODES.contains(n)) {
        return Ok(Some(format!(
            "it uses {} (only columns, constants, function and operator calls, CASE, \
             COALESCE, NULLIF, GREATEST, LEAST, arrays and tests qualify)",
            describe_node(node)
        )));
    }
    let types = numbers(tree, |field| {
        field.contains("typ") && !field.ends_with("typmod")
    });
    if let Some(t) = types.iter().find(|t| **t >= FIRST_NORMAL_OID) {
        // Named as the destination knows it (the OID alone says nothing to
        // a reader).
        let name: Option<String> = dest
            .query_one("SELECT format_type($1, NULL)", &[t])
            .await
            .ok()
            .map(|r| r.get(0));
        return Ok(Some(format!(
            "it uses type {}, which is not built in",
            name.unwrap_or_else(|| format!("OID {t}"))
        )));
    }
    if types.iter().any(|t| OID_TYPES.contains(t)) {
        return Ok(Some(
            "it uses a type whose values name catalog objects (regclass, regconfig...)".into(),
        ));
    }
    let matched: Vec<&str> = collations
        .columns
        .iter()
        .filter_map(|(_, _, m)| match m {
            Mapping::Named(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let used = numbers(tree, |field| field.ends_with("collid"));
    let mut others: Vec<u32> = used
        .into_iter()
        .filter(|c| !PLAIN_COLLATIONS.contains(c))
        .collect();
    others.sort_unstable();
    others.dedup();
    if !others.is_empty() {
        let names: Vec<String> = dest
            .query(
                "SELECT format('%I.%I', n.nspname, c.collname) FROM pg_collation c
                   JOIN pg_namespace n ON n.oid = c.collnamespace WHERE c.oid = ANY($1)",
                &[&others],
            )
            .await
            .map_err(|e| Error::destination("reading the transform's collations", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if names.len() < others.len() || names.iter().any(|n| !matched.contains(&n.as_str())) {
            return Ok(Some(
                "it uses a collation other than the database's default, C, POSIX or a source \
                 column's own"
                    .into(),
            ));
        }
    }
    let functions: Vec<u32> = numbers(tree, |field| field == "funcid" || field == "opfuncid")
        .into_iter()
        .filter(|f| *f != 0)
        .collect();
    let unfit: Option<String> = dest
        .query_opt(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.oid = ANY($1)
                AND NOT (p.oid < $2 AND p.pronamespace = 'pg_catalog'::regnamespace
                  AND NOT EXISTS (SELECT FROM pg_type t WHERE p.oid IN
                        (t.typinput, t.typoutput, t.typreceive, t.typsend))
                  AND NOT (p.proname = 'timezone' AND p.proargtypes[0] = 'text'::regtype)
                  AND NOT (p.prolang = 12 AND p.prosrc = ANY($4))
                  AND (p.provolatile = 'i'
                    OR p.proname::text || '(' || array_to_string(p.proargtypes::oid[]::regtype[], ',')
                       || ')' = ANY($3)))
              ORDER BY p.oid LIMIT 1",
            &[&functions, &FIRST_NORMAL_OID, &TIME_ZONE_ONLY, &LIBM],
        )
        .await
        .map_err(|e| Error::destination("reading the transform's functions", e))?
        .map(|r| r.get(0));
    Ok(unfit.map(|f| {
        format!(
            "it calls {f}, which is not a built-in function known to give the same value on \
             every server of the same version"
        )
    }))
}

/// The kinds of node in `tree` (`{NAME ...}`).
fn nodes(tree: &str) -> impl Iterator<Item = &str> {
    tree.match_indices('{').filter_map(|(at, _)| {
        let rest = &tree[at + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// The values of the numeric fields of `tree` whose names `field` accepts.
fn numbers(tree: &str, field: impl Fn(&str) -> bool) -> Vec<u32> {
    tree.match_indices(':')
        .filter_map(|(at, _)| {
            let rest = &tree[at + 1..];
            let (name, value) = rest.split_once(' ')?;
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return None;
            }
            let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
            (field(name) && !digits.is_empty()).then(|| digits.parse().ok())?
        })
        .collect()
}

/// What a node kind is, for an operator.
fn describe_node(node: &str) -> String {
    match node {
        "COERCEVIAIO" | "ARRAYCOERCEEXPR" => "a cast through text".into(),
        "SQLVALUEFUNCTION" => "a function such as current_date or current_user".into(),
        "NEXTVALUEEXPR" => "a sequence".into(),
        "COERCETODOMAIN" | "COERCETODOMAINVALUE" => "a domain".into(),
        other => format!("an expression of kind {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever text a stored tree holds, reading it never panics.
        #[test]
        fn never_panics_on_any_text(tree in ".{0,300}") {
            let _ = nodes(&tree).count();
            let _ = numbers(&tree, |f| f.ends_with("collid"));
        }
    }

    #[test]
    fn reads_node_kinds_and_numeric_fields() {
        let tree = "({QUERY :targetList ({TARGETENTRY :expr {FUNCEXPR :funcid 871 \
                    :funcresulttype 25 :funcretset false :funccollid 100 :inputcollid 100 \
                    :args ({VAR :varno 1 :varattno 3 :vartype 25 :vartypmod -1 \
                    :varcollid 100}) :location 12} :resname status}) \
                    :rtable ({RANGETBLENTRY :alias <> :coltypes (o 20 25)})})";
        let kinds: Vec<&str> = nodes(tree).collect();
        assert_eq!(
            kinds,
            ["QUERY", "TARGETENTRY", "FUNCEXPR", "VAR", "RANGETBLENTRY"]
        );
        assert_eq!(numbers(tree, |f| f == "funcid"), [871]);
        assert_eq!(
            numbers(tree, |f| f.contains("typ") && !f.ends_with("typmod")),
            [25, 25]
        );
        assert_eq!(numbers(tree, |f| f.ends_with("collid")), [100, 100, 100]);
    }
}
