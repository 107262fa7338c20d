//! Collations: a transform means what it means on the source table, under
//! each column's own collation, so the tables the destination evaluates it
//! over (the shape table it is checked against, the work table) carry each
//! source column's collation.
//!
//! A column's collation is matched in the destination by what it is, not
//! by its name: the same provider, the same locale (libc `LC_COLLATE` and
//! `LC_CTYPE`, or the ICU or builtin locale and rules), determinism, and
//! the same actual version of the collation library. A column that uses the
//! source database's default collation (which has no name) takes the
//! destination's default when that matches, or any matching entry of
//! `pg_collation`.
//!
//! A column whose collation has no match is shaped with the destination's
//! default. That is exact only while the transform passes the column
//! through: a transform that compares it, changes its case, matches it
//! against a pattern or picks the greatest of it is refused (see
//! [`sensitive_uses`]), naming the column and the collation.

use tokio_postgres::Client;
use walfill_core::sql::quote_ident;
use walfill_snapshot::{SourceCollation, SourceTable, DEFAULT_COLLATION};

use crate::error::{Error, Result};

/// Where a source column's collation lands in the destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// The destination's default collation is the same collation.
    Default,
    /// This destination collation (qualified and quoted) is the same.
    Named(String),
    /// Nothing in the destination is the same: the column is shaped with
    /// the destination's default, for pass-through only.
    Unmatched,
}

/// The destination's collation for each collatable column of `table`, by
/// column name; and whether the destination's default is the source's
/// (which decides how constants compare).
#[derive(Clone, Debug, Default)]
pub struct Collations {
    /// Column name, the source's collation, and where it lands.
    pub columns: Vec<(String, SourceCollation, Mapping)>,
    /// The destination's default collation is the source's.
    pub same_default: bool,
}

impl Collations {
    /// The `COLLATE` clause a column of a table shaped like the source
    /// takes (empty for the destination's default).
    pub fn clause(&self, column: &str) -> String {
        match self.columns.iter().find(|(c, _, _)| c == column) {
            Some((_, _, Mapping::Named(name))) => format!(" COLLATE {name}"),
            _ => String::new(),
        }
    }

    /// The columns whose collation the destination does not have.
    fn unmatched(&self) -> impl Iterator<Item = &(String, SourceCollation, Mapping)> {
        self.columns
            .iter()
            .filter(|(_, _, m)| *m == Mapping::Unmatched)
    }
}

/// The destination collation that is the same as the one described by the
/// parameters (provider, collate, ctype, locale, rules, deterministic,
/// version, preferred name), its own name first, then `pg_catalog`'s.
/// libc locale names are compared as the C library reads them (`C.UTF-8`
/// is `C.utf8`).
const MATCH: &str = "
    SELECT format('%I.%I', n.nspname, c.collname)
      FROM pg_collation c
      JOIN pg_namespace n ON n.oid = c.collnamespace
      CROSS JOIN LATERAL (SELECT to_jsonb(c) AS j) AS x
     WHERE c.collprovider::text = $1
       AND c.collencoding IN (-1, pg_char_to_encoding(getdatabaseencoding()))
       AND CASE WHEN $1 = 'c'
                THEN lower(replace(x.j->>'collcollate', '-', '')) = lower(replace($2, '-', ''))
                 AND lower(replace(x.j->>'collctype', '-', '')) = lower(replace($3, '-', ''))
                ELSE coalesce(x.j->>'colllocale', x.j->>'colliculocale') = $4 END
       AND coalesce(x.j->>'collicurules', '') = $5
       AND c.collisdeterministic = $6
       AND coalesce(pg_collation_actual_version(c.oid), '') = $7
     ORDER BY c.collname = $8 DESC, n.nspname = 'pg_catalog' DESC, c.oid
     LIMIT 1";

/// Finds, in the destination session `dest`, the collation of each
/// collatable column of `table`.
pub(super) async fn resolve(dest: &Client, table: &SourceTable) -> Result<Collations> {
    let failed = |e| Error::destination("matching the source columns' collations", e);
    let row = dest
        .query_one(DEFAULT_COLLATION, &[])
        .await
        .map_err(failed)?;
    let ours = |c: &SourceCollation| {
        let libc = c.provider == "c";
        let same = |a: &str, b: &str| a.replace('-', "").eq_ignore_ascii_case(&b.replace('-', ""));
        row.get::<_, String>(0) == c.provider
            && (!libc
                || (same(&row.get::<_, String>(1), &c.collate)
                    && same(&row.get::<_, String>(2), &c.ctype)))
            && (libc || row.get::<_, String>(3) == c.locale)
            && row.get::<_, String>(4) == c.rules
            && c.deterministic
            && row.get::<_, String>(5) == c.version
    };
    let mut found = Collations {
        // Unknown for a description recorded before: as it always was.
        same_default: table.default_collation.as_ref().is_none_or(ours),
        ..Collations::default()
    };
    for column in &table.columns {
        let Some(collation) = &column.collation else {
            continue;
        };
        let mapping = match (&collation.name, ours(collation)) {
            (None, true) => Mapping::Default,
            _ => {
                let named = dest
                    .query_opt(
                        MATCH,
                        &[
                            &collation.provider,
                            &collation.collate,
                            &collation.ctype,
                            &collation.locale,
                            &collation.rules,
                            &collation.deterministic,
                            &collation.version,
                            &collation.name.clone().unwrap_or_default(),
                        ],
                    )
                    .await
                    .map_err(failed)?;
                match (named, ours(collation)) {
                    (Some(row), _) => Mapping::Named(row.get(0)),
                    (None, true) => Mapping::Default,
                    (None, false) => Mapping::Unmatched,
                }
            }
        };
        found
            .columns
            .push((column.name.clone(), collation.clone(), mapping));
    }
    Ok(found)
}

/// Functions whose result depends on the collation they are given, by
/// name: comparisons and sorting (`text_lt`, `bttextcmp`, `text_larger`...),
/// case (`upper`, `lower`, `initcap`, `casefold`), pattern matching (`LIKE`,
/// `ILIKE`, `SIMILAR`, regular expressions). Every other function a
/// collation is passed to (because a text argument has one) gives the same
/// value under every deterministic collation.
const SENSITIVE: &str = "^(text|bpchar|name|bttext|btbpchar|btname|btnametext|bttextname)_?\
    (lt|le|gt|ge|larger|smaller|cmp)|like|regex|similar|^(upper|lower|initcap|casefold)$";

/// The operations of stored query tree `tree` that take the default
/// collation (`:inputcollid 100`): the functions and operators they call,
/// and the ones named by kind (`GREATEST/LEAST`, a row comparison).
fn default_collated(tree: &str) -> (Vec<u32>, Vec<u32>, Vec<String>) {
    let mut functions: Vec<u32> = Vec::new();
    let mut operators: Vec<u32> = Vec::new();
    let mut named: Vec<String> = Vec::new();
    // Each node's own fields come before the nodes nested in it.
    for segment in tree.split('{').skip(1) {
        let kind: String = segment
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        let field = |name: &str| -> Option<u32> {
            let at = segment.find(&format!(":{name} "))? + name.len() + 2;
            segment[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        };
        if kind == "ROWCOMPAREEXPR" {
            let list = segment
                .split(":inputcollids (o")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .unwrap_or("");
            if list.split_whitespace().any(|c| c == "100") {
                named.push("a row comparison".into());
            }
            continue;
        }
        if field("inputcollid") != Some(100) {
            continue;
        }
        match kind.as_str() {
            "MINMAXEXPR" => named.push("GREATEST/LEAST".into()),
            _ => match (field("funcid"), field("opfuncid"), field("opno")) {
                (Some(f), _, _) | (_, Some(f), _) if f != 0 => functions.push(f),
                (_, _, Some(o)) if o != 0 => operators.push(o),
                _ => named.push(format!("an expression of kind {kind}")),
            },
        }
    }
    (functions, operators, named)
}

/// What the transform whose stored query tree is `tree` does under the
/// destination's default collation that depends on which collation it is:
/// each such operation as the function it calls (`upper`, `text_lt`...),
/// or `GREATEST/LEAST`, or a row comparison.
async fn default_sensitive(dest: &Client, tree: &str) -> Result<Vec<String>> {
    let (functions, operators, mut named) = default_collated(tree);
    if !functions.is_empty() || !operators.is_empty() {
        let rows = dest
            .query(
                "SELECT DISTINCT p.proname::text FROM pg_proc p
                  WHERE (p.oid = ANY($1)
                     OR p.oid IN (SELECT oprcode FROM pg_operator WHERE oid = ANY($2)))
                    AND p.proname ~ $3
                  ORDER BY 1",
                &[&functions, &operators, &SENSITIVE],
            )
            .await
            .map_err(|e| Error::destination("reading the transform's functions", e))?;
        named.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    }
    named.sort();
    named.dedup();
    Ok(named)
}

/// Why the transform (stored query tree `tree`, checked over a table shaped
/// with `collations`) cannot mean in the destination what it means on the
/// source: it does something collation-sensitive with a column whose
/// collation the destination lacks, or with constants while the two
/// databases' defaults differ. Columns shaped with the destination's
/// default are the unmatched ones; so a sensitive operation under the
/// default involves one of them, or constants only.
pub(super) async fn sensitive_uses(
    dest: &Client,
    tree: &str,
    collations: &Collations,
    referenced: &[String],
) -> Result<Option<String>> {
    let unmatched: Vec<String> = collations
        .unmatched()
        .filter(|(c, _, _)| referenced.contains(c))
        .map(|(c, collation, _)| format!("column {} ({collation})", quote_ident(c)))
        .collect();
    if unmatched.is_empty() && collations.same_default {
        return Ok(None);
    }
    let uses = default_sensitive(dest, tree).await?;
    if uses.is_empty() {
        return Ok(None);
    }
    let what = match unmatched.is_empty() {
        true => "text constants, which compare under the database's default collation, and \
                 the destination's default is not the source's"
            .to_string(),
        false => format!(
            "{}, and the destination database has no collation that matches it (the same \
             provider, locale and version)",
            unmatched.join("; ")
        ),
    };
    Ok(Some(format!(
        "the transform does something that depends on the collation ({}) with {what}; so it \
         cannot give in the destination what it gives on the source. Fix: create the same \
         collation in the destination database (CREATE COLLATION ... at the same library \
         version), or give the expression an explicit COLLATE",
        uses.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_the_operations_under_the_default_collation() {
        let tree = "({QUERY :targetList ({TARGETENTRY :expr {FUNCEXPR :funcid 871 \
                    :funcresulttype 25 :funccollid 100 :inputcollid 100 :args ({VAR :varno 1 \
                    :varattno 2 :vartype 25 :varcollid 100})} :resname u} {TARGETENTRY :expr \
                    {OPEXPR :opno 664 :opfuncid 740 :opcollid 0 :inputcollid 950 :args ()} \
                    :resname c} {TARGETENTRY :expr {MINMAXEXPR :minmaxtype 25 :minmaxcollid 100 \
                    :inputcollid 100 :op 0 :args ()} :resname g})})";
        let (functions, operators, named) = default_collated(tree);
        assert_eq!(functions, [871], "upper() under the default, not < under C");
        assert!(operators.is_empty());
        assert_eq!(named, ["GREATEST/LEAST"]);
    }

    proptest! {
        /// Whatever text the server's trees hold (names, constants), the
        /// scan never panics.
        #[test]
        fn never_panics_on_any_text(tree in ".{0,300}") {
            let _ = default_collated(&tree);
        }
    }
}
