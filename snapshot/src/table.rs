//! What walfill needs to know about a source table, read from its catalog.

use serde::{Deserialize, Serialize};
use tokio_postgres::GenericClient;

use crate::error::SnapshotError;
use crate::sql::quote_qualified;

/// A column of the source table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableColumn {
    /// Attribute number.
    pub attnum: i16,
    /// Column name.
    pub name: String,
    /// The type as SQL spells it (`format_type`), e.g. `character varying(20)`.
    pub sql_type: String,
    /// Type OID.
    pub type_oid: u32,
    /// `attlen`: -1 for varlena types, which can be TOASTed.
    pub len: i16,
    /// `attstorage`: `p` plain, `e` external, `m` main, `x` extended.
    pub storage: char,
    /// The expression of a stored generated column (not replicated by
    /// PostgreSQL 15's logical decoding, so walfill recomputes it).
    pub generated: Option<String>,
    /// The column's collation as the source defines it, for a collatable
    /// type (`None` otherwise, and for a description recorded before
    /// walfill read collations).
    #[serde(default)]
    pub collation: Option<SourceCollation>,
}

/// A source column's collation: what it is on the source, so that the
/// destination can evaluate a transform under the same one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCollation {
    /// Its name on the source (`C`, `de-x-icu`...), or `None` where the
    /// column uses the database's default collation, which has no name.
    pub name: Option<String>,
    /// `c` (libc), `i` (ICU) or `b` (PostgreSQL's builtin provider).
    pub provider: String,
    /// `LC_COLLATE` of a libc collation.
    pub collate: String,
    /// `LC_CTYPE` of a libc collation.
    pub ctype: String,
    /// The locale of an ICU or builtin collation.
    pub locale: String,
    /// ICU tailoring rules (PostgreSQL 16 and later), empty if none.
    pub rules: String,
    /// Whether strings that differ in bytes always compare unequal.
    pub deterministic: bool,
    /// The collation library's version of it, as the server reads it now
    /// (empty where none applies, as for `C`).
    pub version: String,
}

impl std::fmt::Display for SourceCollation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "collation \"{name}\"")?,
            None => f.write_str("the source database's default collation")?,
        }
        match self.provider.as_str() {
            "c" => write!(f, " (libc {}", self.collate)?,
            "i" => write!(f, " (ICU {}", self.locale)?,
            other => write!(f, " (provider {other}, {}", self.locale)?,
        }
        if !self.rules.is_empty() {
            write!(f, " with rules {:?}", self.rules)?;
        }
        if !self.version.is_empty() {
            write!(f, ", version {}", self.version)?;
        }
        f.write_str(")")
    }
}

impl TableColumn {
    /// Whether values can be stored out of line, and so arrive from logical
    /// decoding as "unchanged TOAST" when an update leaves them alone. That
    /// depends on the type (a varlena), not on the column's current storage:
    /// `SET STORAGE PLAIN` leaves the values already stored out of line where
    /// they are.
    pub fn toastable(&self) -> bool {
        self.len == -1
    }
}

/// The collation of each collatable column of table `$1`: its own, or the
/// database's default (which has no name) described from `pg_database`.
/// Read through `to_jsonb` so one statement serves every major version
/// (the ICU locale is `colliculocale` in PostgreSQL 15 and 16, `colllocale`
/// from 17; rules arrive in 16).
const COLLATIONS: &str = "
    SELECT a.attnum,
           CASE WHEN a.attcollation <> 100 THEN c.collname::text END,
           CASE WHEN a.attcollation = 100 THEN db.d->>'datlocprovider'
                ELSE x.j->>'collprovider' END,
           coalesce(CASE WHEN a.attcollation = 100 THEN db.d->>'datcollate'
                         ELSE x.j->>'collcollate' END, ''),
           coalesce(CASE WHEN a.attcollation = 100 THEN db.d->>'datctype'
                         ELSE x.j->>'collctype' END, ''),
           coalesce(CASE WHEN a.attcollation = 100
                         THEN coalesce(db.d->>'datlocale', db.d->>'daticulocale')
                         ELSE coalesce(x.j->>'colllocale', x.j->>'colliculocale') END, ''),
           coalesce(CASE WHEN a.attcollation = 100 THEN db.d->>'daticurules'
                         ELSE x.j->>'collicurules' END, ''),
           c.collisdeterministic,
           coalesce(CASE WHEN a.attcollation = 100
                         THEN pg_database_collation_actual_version(db.oid)
                         ELSE pg_collation_actual_version(c.oid) END, '')
      FROM pg_attribute a
      JOIN pg_collation c ON c.oid = a.attcollation
      CROSS JOIN LATERAL (SELECT to_jsonb(c) AS j) AS x
      CROSS JOIN (SELECT oid, to_jsonb(pg_database) AS d FROM pg_database
                   WHERE datname = current_database()) AS db
     WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attcollation <> 0";

/// The database's default collation, described as a column's is.
pub const DEFAULT_COLLATION: &str = "
    SELECT d->>'datlocprovider', coalesce(d->>'datcollate', ''), coalesce(d->>'datctype', ''),
           coalesce(d->>'datlocale', d->>'daticulocale', ''), coalesce(d->>'daticurules', ''),
           coalesce(pg_database_collation_actual_version(oid), '')
      FROM (SELECT oid, to_jsonb(pg_database) AS d FROM pg_database
             WHERE datname = current_database()) AS db";

/// `pg_class.relreplident`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaIdentity {
    /// `d`: the primary key.
    Default,
    /// `i`: a chosen unique index.
    Index,
    /// `f`: the whole old row.
    Full,
    /// `n`: nothing; updates and deletes cannot be replicated.
    Nothing,
}

/// A source table as walfill sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceTable {
    /// Schema.
    pub schema: String,
    /// Name.
    pub name: String,
    /// `pg_class.oid`.
    pub oid: u32,
    /// Columns in attribute order, dropped ones left out.
    pub columns: Vec<TableColumn>,
    /// Replica identity setting.
    pub replica_identity: ReplicaIdentity,
    /// Columns that identify a row in updates and deletes (primary key or
    /// replica identity index), or a unique key under `REPLICA IDENTITY FULL`.
    pub key: Vec<String>,
    /// Rows, estimated as PostgreSQL's planner does: the density of the
    /// last `ANALYZE` or `VACUUM` times the table's current size.
    pub estimated_rows: i64,
    /// The table was never analyzed: the estimate assumes rows of the
    /// columns' typical width.
    #[serde(default)]
    pub estimated_from_size: bool,
    /// The source database's encoding (`UTF8`...), where the description
    /// records it.
    #[serde(default)]
    pub encoding: Option<String>,
    /// The source database's default collation, where the description
    /// records it.
    #[serde(default)]
    pub default_collation: Option<SourceCollation>,
}

impl SourceTable {
    /// Reads the catalog entries of table `schema.name`. Errors name the
    /// table and, for a table walfill cannot use, the statement that fixes it.
    pub async fn describe(
        client: &impl GenericClient,
        schema: &str,
        name: &str,
    ) -> Result<SourceTable, SnapshotError> {
        let oid: Option<u32> = client
            .query_opt(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = $1 AND c.relname = $2",
                &[&schema, &name],
            )
            .await
            .map_err(|e| SnapshotError::query("looking up the source table", e))?
            .map(|r| r.get(0));
        let oid = oid.ok_or_else(|| SnapshotError::Unusable {
            table: format!("{schema}.{name}"),
            problem: "does not exist in the source database".into(),
            fix: "check `source` in the target's configuration (schema.table)".into(),
        })?;
        SourceTable::describe_oid(client, oid).await
    }

    /// Reads the catalog entries of the table with OID `oid`, whatever it is
    /// called now.
    pub async fn describe_oid(
        client: &impl GenericClient,
        oid: u32,
    ) -> Result<SourceTable, SnapshotError> {
        let row = client
            .query_opt(
                "SELECT c.oid, c.relkind::text, c.relreplident::text, c.reltuples::float8,
                        c.relpersistence::text, n.nspname::text, c.relname::text,
                        c.relpages::float8,
                        pg_relation_size(c.oid)::float8
                          / current_setting('block_size')::float8,
                        current_setting('block_size')::float8,
                        (SELECT coalesce(sum(CASE WHEN a.attlen > 0 THEN a.attlen ELSE 32 END),
                                         0)::float8
                           FROM pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                        getdatabaseencoding()::text
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = $1",
                &[&oid],
            )
            .await
            .map_err(|e| SnapshotError::query("reading the source table's catalog", e))?
            .ok_or_else(|| SnapshotError::Unusable {
                table: format!("with OID {oid}"),
                problem: "no longer exists in the source database (dropped?)".into(),
                fix: "configure a new version of the target to build it from the table that \
                      exists now"
                    .into(),
            })?;
        let schema: String = row.get(5);
        let name: String = row.get(6);
        let (schema, name) = (schema.as_str(), name.as_str());
        let qualified = format!("{schema}.{name}");
        let oid: u32 = row.get(0);
        let relkind: String = row.get(1);
        let replident: String = row.get(2);
        let (estimated_rows, estimated_from_size) =
            estimate_rows(row.get(3), row.get(7), row.get(8), row.get(9), row.get(10));
        let persistence: String = row.get(4);
        let encoding: String = row.get(11);
        if relkind != "r" {
            let what = match relkind.as_str() {
                "p" => "a partitioned table (name one of its partitions)",
                "v" => "a view",
                "m" => "a materialized view",
                "f" => "a foreign table",
                _ => "not an ordinary table",
            };
            return Err(SnapshotError::Unusable {
                table: qualified,
                problem: format!("is {what}"),
                fix: "point the target at an ordinary table".into(),
            });
        }
        if persistence != "p" {
            return Err(SnapshotError::Unusable {
                table: qualified.clone(),
                problem: "is unlogged or temporary, so its changes are not in the WAL".into(),
                fix: format!("ALTER TABLE {} SET LOGGED", quote_qualified(schema, name)),
            });
        }

        let columns = client
            .query(
                "SELECT a.attnum, a.attname::text, format_type(a.atttypid, a.atttypmod),
                        a.atttypid, a.attlen, a.attstorage::text,
                        CASE WHEN a.attgenerated <> '' THEN pg_get_expr(d.adbin, d.adrelid) END
                   FROM pg_attribute a
                   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                  WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
                  ORDER BY a.attnum",
                &[&oid],
            )
            .await
            .map_err(|e| SnapshotError::query("reading the source table's columns", e))?
            .into_iter()
            .map(|r| TableColumn {
                attnum: r.get(0),
                name: r.get(1),
                sql_type: r.get(2),
                type_oid: r.get(3),
                len: r.get(4),
                storage: r.get::<_, String>(5).chars().next().unwrap_or('p'),
                generated: r.get(6),
                collation: None,
            })
            .collect::<Vec<_>>();
        let mut columns = columns;
        let default_collation = client
            .query_one(DEFAULT_COLLATION, &[])
            .await
            .map_err(|e| SnapshotError::query("reading the source database's collation", e))
            .map(|r| SourceCollation {
                name: None,
                provider: r.get(0),
                collate: r.get(1),
                ctype: r.get(2),
                locale: r.get(3),
                rules: r.get(4),
                deterministic: true,
                version: r.get(5),
            })?;
        for r in client
            .query(COLLATIONS, &[&oid])
            .await
            .map_err(|e| SnapshotError::query("reading the source columns' collations", e))?
        {
            let attnum: i16 = r.get(0);
            if let Some(column) = columns.iter_mut().find(|c| c.attnum == attnum) {
                column.collation = Some(SourceCollation {
                    name: r.get(1),
                    provider: r.get(2),
                    collate: r.get(3),
                    ctype: r.get(4),
                    locale: r.get(5),
                    rules: r.get(6),
                    deterministic: r.get(7),
                    version: r.get(8),
                });
            }
        }

        let indexes = client
            .query(
                "SELECT i.indisprimary, i.indisreplident,
                        bool_and(a.attnotnull),
                        array_agg(a.attname::text ORDER BY k.ord)
                   FROM pg_index i
                   CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                  WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate
                    AND i.indpred IS NULL AND i.indexprs IS NULL
                  GROUP BY i.indexrelid, i.indisprimary, i.indisreplident
                  ORDER BY i.indisprimary DESC, i.indisreplident DESC, i.indexrelid",
                &[&oid],
            )
            .await
            .map_err(|e| SnapshotError::query("reading the source table's indexes", e))?;
        let pick = |f: &dyn Fn(bool, bool, bool) -> bool| {
            indexes
                .iter()
                .find(|r| f(r.get(0), r.get(1), r.get(2)))
                .map(|r| r.get::<_, Vec<String>>(3))
        };

        let replica_identity = match replident.as_str() {
            "d" => ReplicaIdentity::Default,
            "i" => ReplicaIdentity::Index,
            "f" => ReplicaIdentity::Full,
            _ => ReplicaIdentity::Nothing,
        };
        let quoted = quote_qualified(schema, name);
        let key = match replica_identity {
            ReplicaIdentity::Default => {
                pick(&|primary, _, _| primary).ok_or_else(|| SnapshotError::Unusable {
                    table: qualified.clone(),
                    problem: "has no primary key, so its updates and deletes carry no row \
                              identity"
                        .into(),
                    fix: format!(
                        "add a primary key (ALTER TABLE {quoted} ADD PRIMARY KEY (...)), or \
                         ALTER TABLE {quoted} REPLICA IDENTITY USING INDEX <unique index>"
                    ),
                })?
            }
            ReplicaIdentity::Index => {
                pick(&|_, replident, _| replident).ok_or_else(|| SnapshotError::Unusable {
                    table: qualified.clone(),
                    problem: "uses REPLICA IDENTITY USING INDEX but that index is not usable"
                        .into(),
                    fix: format!("ALTER TABLE {quoted} REPLICA IDENTITY DEFAULT"),
                })?
            }
            ReplicaIdentity::Full => {
                pick(&|_, _, not_null| not_null).ok_or_else(|| SnapshotError::Unusable {
                    table: qualified.clone(),
                    problem: "has REPLICA IDENTITY FULL but no primary key or unique index \
                              on NOT NULL columns to order and identify rows by"
                        .into(),
                    fix: format!("ALTER TABLE {quoted} ADD PRIMARY KEY (...)"),
                })?
            }
            ReplicaIdentity::Nothing => {
                return Err(SnapshotError::Unusable {
                    table: qualified,
                    problem: "has REPLICA IDENTITY NOTHING, so its updates and deletes are not \
                              replicated"
                        .into(),
                    fix: format!("ALTER TABLE {quoted} REPLICA IDENTITY DEFAULT"),
                })
            }
        };

        Ok(SourceTable {
            schema: schema.to_string(),
            name: name.to_string(),
            oid,
            columns,
            replica_identity,
            key,
            estimated_rows,
            estimated_from_size,
            encoding: Some(encoding),
            default_collation: Some(default_collation),
        })
    }

    /// `"schema"."name"`.
    pub fn quoted(&self) -> String {
        quote_qualified(&self.schema, &self.name)
    }

    /// The columns logical decoding sends and snapshots copy (not generated ones).
    pub fn replicated_columns(&self) -> impl Iterator<Item = &TableColumn> {
        self.columns.iter().filter(|c| c.generated.is_none())
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&TableColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The column with attribute number `attnum`.
    pub fn column_by_attnum(&self, attnum: i16) -> Option<&TableColumn> {
        self.columns.iter().find(|c| c.attnum == attnum)
    }
}

/// Rows of a table of `pages` pages now, as PostgreSQL's planner estimates
/// them: the density `reltuples / relpages` of the last `ANALYZE` or
/// `VACUUM`, or, for a table never analyzed (`reltuples` -1), the rows of
/// `width` bytes (plus tuple header and line pointer) that fill a page.
/// Returns the estimate and whether it came from the size alone.
fn estimate_rows(reltuples: f64, relpages: f64, pages: f64, block: f64, width: f64) -> (i64, bool) {
    if reltuples >= 0.0 && relpages > 0.0 {
        return ((reltuples / relpages * pages).round() as i64, false);
    }
    if reltuples >= 0.0 && pages == 0.0 {
        return (reltuples as i64, false);
    }
    // 24 bytes of page header; per row a 24-byte header (MAXALIGNed) and a
    // 4-byte line pointer.
    let per_page = ((block - 24.0) / (width + 28.0)).floor().max(1.0);
    ((per_page * pages).round() as i64, reltuples < 0.0)
}

impl std::fmt::Display for SourceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

#[cfg(test)]
mod estimate_tests {
    use super::estimate_rows;

    #[test]
    fn density_scales_with_the_current_size() {
        assert_eq!(
            estimate_rows(1000.0, 10.0, 20.0, 8192.0, 40.0),
            (2000, false)
        );
        assert_eq!(estimate_rows(0.0, 0.0, 0.0, 8192.0, 40.0), (0, false));
    }

    #[test]
    fn a_table_never_analyzed_is_estimated_from_its_size() {
        // 8168 / 68 = 120 rows of 40 bytes per page.
        assert_eq!(
            estimate_rows(-1.0, 0.0, 100.0, 8192.0, 40.0),
            (12_000, true)
        );
        assert_eq!(estimate_rows(-1.0, 0.0, 0.0, 8192.0, 40.0), (0, true));
    }
}
