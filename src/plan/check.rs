//! Building a [`Plan`]: the source's catalog, then the transform checked in
//! the destination over a temporary table shaped like the source.

use tokio_postgres::Client;
use walfill_snapshot::sql::{describe_pg_error, quote_ident};
use walfill_snapshot::{ReplicaIdentity, SourceTable};

use super::{Definition, HiddenColumn, OutputColumn, Plan, RESERVED_PREFIX, WORK_TABLE};
use crate::error::{Error, Result};

/// The temporary table shaped exactly like the source (no walfill columns),
/// which the transform is checked against.
const SHAPE_TABLE: &str = "_walfill_shape";
const CHECK_VIEW: &str = "_walfill_check";

/// Checks `def` against the source and the destination and returns its plan.
///
/// Writes nothing but temporary objects of the destination session: the work
/// table the apply uses afterwards stays, the rest is dropped.
pub async fn build(source: &Client, dest: &Client, def: &Definition) -> Result<Plan> {
    let table = SourceTable::describe(source, &def.source.schema, &def.source.name).await?;
    let problem = |text: String| Error::Problems(vec![format!("target {}: {text}", def.target)]);

    if let Some(key) = &def.key {
        let mut given = key.clone();
        let mut identity = table.key.clone();
        given.sort();
        identity.sort();
        if given != identity {
            return Err(problem(format!(
                "key = {:?}, but the row identity of {table} is {:?}; walfill keys versions by \
                 the row identity so updates and deletes find their rows: set key = {:?} or \
                 leave key out",
                key, table.key, table.key
            )));
        }
    }

    create_shaped(dest, SHAPE_TABLE, &table, false).await?;
    create_shaped(dest, WORK_TABLE, &table, true).await?;

    let alias = quote_ident(&table.name);
    let mut query = format!(
        "SELECT {} FROM pg_temp.{SHAPE_TABLE} AS {alias}",
        def.select
    );
    if let Some(filter) = &def.filter {
        query.push_str(&format!(" WHERE {filter}"));
    }
    let transform_error = |e: &tokio_postgres::Error| {
        let mut text = format!(
            "the transform does not work: {}; select = {:?}",
            describe_pg_error(e),
            def.select
        );
        if let Some(filter) = &def.filter {
            text.push_str(&format!(", where = {filter:?}"));
        }
        problem(text)
    };
    dest.execute(&format!("DROP VIEW IF EXISTS pg_temp.{CHECK_VIEW}"), &[])
        .await
        .map_err(|e| Error::destination("dropping the check view", e))?;
    dest.execute(&format!("CREATE TEMP VIEW {CHECK_VIEW} AS {query}"), &[])
        .await
        .map_err(|e| transform_error(&e))?;

    let outputs: Vec<OutputColumn> = dest
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
              WHERE attrelid = $1::text::regclass AND attnum > 0 ORDER BY attnum",
            &[&format!("pg_temp.{CHECK_VIEW}")],
        )
        .await
        .map_err(|e| Error::destination("reading the transform's columns", e))?
        .iter()
        .map(|r| OutputColumn {
            name: r.get(0),
            sql_type: r.get(1),
        })
        .collect();
    let referenced: Vec<String> = dest
        .query(
            "SELECT DISTINCT a.attname::text, a.attnum
               FROM pg_depend d
               JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
               JOIN pg_attribute a ON a.attrelid = d.refobjid
                AND (a.attnum = d.refobjsubid OR (d.refobjsubid = 0 AND a.attnum > 0))
              WHERE r.ev_class = $1::text::regclass AND d.refobjid = $2::text::regclass
                AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[
                &format!("pg_temp.{CHECK_VIEW}"),
                &format!("pg_temp.{SHAPE_TABLE}"),
            ],
        )
        .await
        .map_err(|e| Error::destination("reading the transform's dependencies", e))?
        .iter()
        .map(|r| r.get(0))
        .collect();

    let mut problems = Vec::new();
    for (i, out) in outputs.iter().enumerate() {
        if out.name == "?column?" {
            problems.push(format!(
                "output column {} of the select has no name: add AS <name>",
                i + 1
            ));
        } else if out.name.starts_with(RESERVED_PREFIX) {
            problems.push(format!(
                "output column {:?} starts with {RESERVED_PREFIX}, which walfill reserves",
                out.name
            ));
        } else if outputs[..i].iter().any(|o| o.name == out.name) {
            problems.push(format!("output column {:?} appears twice", out.name));
        }
    }

    // Every key column must pass through as a plain reference to itself.
    let statement = dest
        .prepare(&format!(
            "SELECT {} FROM pg_temp.{SHAPE_TABLE} AS {alias}",
            def.select
        ))
        .await
        .map_err(|e| transform_error(&e))?;
    let shape_oid: u32 = dest
        .query_one(
            "SELECT $1::text::regclass::oid",
            &[&format!("pg_temp.{SHAPE_TABLE}")],
        )
        .await
        .map_err(|e| Error::destination("reading the check table", e))?
        .get(0);
    for key in &table.key {
        let attnum = table.column(key).map(|c| c.attnum).unwrap_or(0);
        let passes = statement.columns().iter().any(|c| {
            c.name() == key && c.table_oid() == Some(shape_oid) && c.column_id() == Some(attnum)
        });
        if !passes {
            problems.push(format!(
                "the select must include the key column {key:?} unchanged (as `{key}`), so \
                 changes from the source can find their rows"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Error::Problems(
            problems
                .into_iter()
                .map(|p| format!("target {}: {p}", def.target))
                .collect(),
        ));
    }
    dest.batch_execute(&format!(
        "DROP VIEW pg_temp.{CHECK_VIEW}; DROP TABLE pg_temp.{SHAPE_TABLE}"
    ))
    .await
    .map_err(|e| Error::destination("dropping the check objects", e))?;

    let hidden = if table.replica_identity == ReplicaIdentity::Full {
        // The old row arrives whole with every update; nothing to remember.
        Vec::new()
    } else {
        referenced
            .iter()
            .filter(|name| !table.key.contains(name))
            .filter_map(|name| table.column(name))
            .filter(|c| c.toastable() && c.generated.is_none())
            .map(|c| {
                let column = format!("{RESERVED_PREFIX}src_{}", c.name);
                HiddenColumn {
                    source: c.name.clone(),
                    column: if column.len() <= 63 {
                        column
                    } else {
                        format!("{RESERVED_PREFIX}src_{}", c.attnum)
                    },
                    sql_type: c.sql_type.clone(),
                }
            })
            .collect()
    };

    Ok(Plan {
        def: def.clone(),
        key: table.key.clone(),
        source: table,
        outputs,
        hidden,
        referenced,
    })
}

/// Creates a temporary table with the source's columns (stored generated
/// columns recomputed from their expressions), plus walfill's bookkeeping
/// columns when `work` is set.
async fn create_shaped(dest: &Client, name: &str, table: &SourceTable, work: bool) -> Result<()> {
    let mut columns: Vec<String> = table
        .columns
        .iter()
        .map(|c| match &c.generated {
            Some(expr) => format!(
                "{} {} GENERATED ALWAYS AS ({expr}) STORED",
                quote_ident(&c.name),
                c.sql_type
            ),
            None => format!("{} {}", quote_ident(&c.name), c.sql_type),
        })
        .collect();
    if work {
        columns.extend(super::sql::work_columns(table));
    }
    let sql = format!(
        "DROP TABLE IF EXISTS pg_temp.{name};
         CREATE TEMP TABLE {name} ({}) ON COMMIT DELETE ROWS",
        columns.join(", ")
    );
    dest.batch_execute(&sql).await.map_err(|e| {
        Error::Problems(vec![format!(
            "source table {table} cannot be mirrored in the destination: {}; every column type \
             of the source must exist in the destination database",
            describe_pg_error(&e)
        )])
    })
}
