//! Building a [`Plan`]: the source table's description, then the transform
//! checked in the destination over a temporary table shaped like it.

use tokio_postgres::{Client, GenericClient};
use walfill_core::sql::{describe_pg_error, quote_ident};
use walfill_snapshot::{SnapshotError, SourceTable};

use super::collation::Collations;
use super::{Definition, HiddenColumn, OutputColumn, Plan, RESERVED_PREFIX, WORK_TABLE};
use crate::error::{Error, Result};

/// The temporary table shaped exactly like the source (no walfill columns),
/// which the transform is checked against.
const SHAPE_TABLE: &str = "_walfill_shape";
const CHECK_VIEW: &str = "_walfill_check";

/// Describes the source table a new version of `def` reads, by name, and
/// checks the configured key against its row identity.
pub async fn describe(source: &impl GenericClient, def: &Definition) -> Result<SourceTable> {
    let table = SourceTable::describe(source, &def.source.schema, &def.source.name).await?;
    if let Some(key) = &def.key {
        let mut given = key.clone();
        let mut identity = table.key.clone();
        given.sort();
        identity.sort();
        if given != identity {
            return Err(Error::Problems(vec![format!(
                "target {}: key = {:?}, but the row identity of {table} is {:?}; walfill keys \
                 versions by the row identity so updates and deletes find their rows: set key \
                 = {:?} or leave key out",
                def.target, key, table.key, table.key
            )]));
        }
    }
    Ok(table)
}

/// Checks `def`'s transform over `table` (the source table as the version
/// is planned) in the destination, and returns the plan.
///
/// Writes nothing but temporary objects of the destination session: the work
/// table the apply uses afterwards stays, the rest is dropped.
pub async fn build(dest: &Client, def: &Definition, table: SourceTable) -> Result<Plan> {
    let collations = super::collation::resolve(dest, &table).await?;
    create_shaped(dest, SHAPE_TABLE, &table, &collations, false).await?;
    create_shaped(dest, WORK_TABLE, &table, &collations, true).await?;
    create_check_view(dest, def, &table).await?;
    let (outputs, referenced) = view_columns(dest).await?;

    let (mut problems, warnings, tree) = row_by_row_problems(dest).await?;
    if problems.is_empty() {
        if let Some(why) =
            super::collation::sensitive_uses(dest, &tree, &collations, &referenced).await?
        {
            problems.push(why);
        }
    }
    problems.extend(output_problems(&outputs));
    let (key_problems, identity) = keys_and_identity(dest, def, &table).await?;
    problems.extend(key_problems);
    let not_portable = match table.columns.iter().any(|c| c.generated.is_some()) {
        true => {
            Some("the source table has generated columns, which the destination computes".into())
        }
        false if problems.is_empty() => {
            super::portable::not_portable(dest, &tree, &collations).await?
        }
        false => None,
    };
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

    Ok(Plan {
        def: def.clone(),
        key: table.key.clone(),
        hidden: hidden_columns(&table, &referenced),
        source: table,
        outputs,
        referenced,
        identity,
        not_portable,
        collations,
        warnings: warnings
            .into_iter()
            .map(|w| format!("target {}: {w}", def.target))
            .collect(),
    })
}

/// The transform does not work: PostgreSQL's error, pointed at the part of
/// the select list or filter it names (`select_at`, `filter_at`: where they
/// start in the statement, in characters).
fn transform_error(
    def: &Definition,
    e: &tokio_postgres::Error,
    select_at: usize,
    filter_at: usize,
) -> Error {
    Error::Problems(vec![format!(
        "target {}: the transform does not work: {}",
        def.target,
        point_at(e, def, select_at, filter_at)
    )])
}

/// Creates the check view: the transform (select list and filter) over the
/// shape table.
async fn create_check_view(dest: &Client, def: &Definition, table: &SourceTable) -> Result<()> {
    let alias = quote_ident(&table.name);
    let from = format!(" FROM pg_temp.{SHAPE_TABLE} AS {alias}");
    let mut query = format!("SELECT {}{from}", def.select);
    if let Some(filter) = &def.filter {
        // Parenthesized, so the filter can only be a condition.
        query.push_str(&format!(" WHERE ({filter})"));
    }
    // Where the select list and the filter start in the statement (in
    // characters, as PostgreSQL counts an error's position).
    let view_prefix = format!("CREATE TEMP VIEW {CHECK_VIEW} AS SELECT ");
    let select_at = view_prefix.chars().count();
    let filter_at =
        select_at + def.select.chars().count() + from.chars().count() + " WHERE (".len();
    dest.execute(&format!("DROP VIEW IF EXISTS pg_temp.{CHECK_VIEW}"), &[])
        .await
        .map_err(|e| Error::destination("dropping the check view", e))?;
    let Err(e) = dest
        .execute(&format!("CREATE TEMP VIEW {CHECK_VIEW} AS {query}"), &[])
        .await
    else {
        return Ok(());
    };
    // A filter that is not one condition (clauses appended to it, which
    // parse only outside the parentheses) says so.
    if let Some(filter) = &def.filter {
        let syntax = Some(&tokio_postgres::error::SqlState::SYNTAX_ERROR);
        let bare = format!("SELECT 1{from} WHERE {filter}");
        if e.code() == syntax && dest.prepare(&bare).await.is_ok() {
            return Err(Error::Problems(vec![format!(
                "target {}: where = {filter:?} is not a condition: it must be one boolean \
                 expression over the source row, not SQL clauses (GROUP BY, WINDOW, ORDER BY, \
                 UNION...)",
                def.target
            )]));
        }
    }
    Err(transform_error(def, &e, select_at, filter_at))
}

/// The check view's output columns, and the shape table's columns it reads.
async fn view_columns(dest: &Client) -> Result<(Vec<OutputColumn>, Vec<String>)> {
    let outputs: Vec<OutputColumn> = dest
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod),
                    CASE WHEN attcollation NOT IN (0, 100) THEN attcollation::regcollation::text
                    END
               FROM pg_attribute
              WHERE attrelid = $1::text::regclass AND attnum > 0 ORDER BY attnum",
            &[&format!("pg_temp.{CHECK_VIEW}")],
        )
        .await
        .map_err(|e| Error::destination("reading the transform's columns", e))?
        .iter()
        .map(|r| OutputColumn {
            name: r.get(0),
            sql_type: r.get(1),
            collation: r.get(2),
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
    Ok((outputs, referenced))
}

/// Output columns without a name, with walfill's reserved prefix, or twice.
fn output_problems(outputs: &[OutputColumn]) -> Vec<String> {
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
    problems
}

/// The key columns the select list does not pass through unchanged (each
/// must be a plain reference to itself), and whether the transform is the
/// identity.
async fn keys_and_identity(
    dest: &Client,
    def: &Definition,
    table: &SourceTable,
) -> Result<(Vec<String>, bool)> {
    let alias = quote_ident(&table.name);
    let statement = dest
        .prepare(&format!(
            "SELECT {} FROM pg_temp.{SHAPE_TABLE} AS {alias}",
            def.select
        ))
        .await
        .map_err(|e| transform_error(def, &e, "SELECT ".len(), usize::MAX))?;
    let shape_oid: u32 = dest
        .query_one(
            "SELECT $1::text::regclass::oid",
            &[&format!("pg_temp.{SHAPE_TABLE}")],
        )
        .await
        .map_err(|e| Error::destination("reading the check table", e))?
        .get(0);
    // The shape table numbers the columns densely, in order.
    let position = |name: &str| table.columns.iter().position(|c| c.name == name);
    let reads = |c: &tokio_postgres::Column, name: &str| {
        let at = position(name).map(|p| p as i16 + 1);
        c.name() == name && c.table_oid() == Some(shape_oid) && c.column_id() == at
    };
    let problems = table
        .key
        .iter()
        .filter(|key| !statement.columns().iter().any(|c| reads(c, key)))
        .map(|key| {
            format!(
                "the select must include the key column {key:?} unchanged (as `{key}`), so \
                 changes from the source can find their rows"
            )
        })
        .collect();
    // The transform is the identity when, with no filter, its columns are
    // the source's replicated columns, each a plain reference to itself, in
    // order: a column's name and type alone do not say so (`upper(v) AS v`
    // has v's name and type).
    let replicated: Vec<&str> = table
        .columns
        .iter()
        .filter(|c| c.generated.is_none())
        .map(|c| c.name.as_str())
        .collect();
    let identity = def.filter.is_none()
        && statement.columns().len() == replicated.len()
        && statement
            .columns()
            .iter()
            .zip(&replicated)
            .all(|(c, name)| reads(c, name));
    Ok((problems, identity))
}

/// Values an update leaves alone may arrive as "unchanged TOAST" for any
/// varlena column, whatever its storage now and whatever the replica
/// identity now (history may have been written under another): every such
/// column the transform reads is kept beside the derived row.
fn hidden_columns(table: &SourceTable, referenced: &[String]) -> Vec<HiddenColumn> {
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
}

/// Why the checked transform is not a row-by-row function of one source
/// row: aggregates, window functions (also through a named `WINDOW`),
/// set-returning functions, subqueries, other tables, grouping, ordering,
/// limits or set operations; and, as warnings, the volatile functions it
/// calls. Read from the view's stored query tree, which sees through any
/// wrapping expression, which it also gives back.
async fn row_by_row_problems(dest: &Client) -> Result<(Vec<String>, Vec<String>, String)> {
    let row = dest
        .query_one(
            "SELECT r.ev_action::text,
                    ARRAY(SELECT DISTINCT d.refobjid::regclass::text FROM pg_depend d
                           WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                             AND d.refclassid = 'pg_class'::regclass
                             AND d.refobjid NOT IN (r.ev_class, $2::text::regclass))
               FROM pg_rewrite r WHERE r.ev_class = $1::text::regclass",
            &[
                &format!("pg_temp.{CHECK_VIEW}"),
                &format!("pg_temp.{SHAPE_TABLE}"),
            ],
        )
        .await
        .map_err(|e| Error::destination("reading the transform's query tree", e))?;
    let tree: String = row.get(0);
    let others: Vec<String> = row.get(1);
    let mut problems = Vec::new();
    let flag = |name: &str| tree.contains(&format!(":{name} true"));
    let used = |name: &str| {
        tree.contains(&format!(":{name} "))
            && !tree.contains(&format!(":{name} <>"))
            && !tree.contains(&format!(":{name} (b)"))
    };
    let rule = "walfill applies the transform to one source row at a time, as rows change";
    if flag("hasWindowFuncs") || used("windowClause") {
        problems.push(format!(
            "the transform uses a window function, whose value depends on other rows; {rule}"
        ));
    }
    if flag("hasAggs") || used("groupClause") || used("havingQual") || used("groupingSets") {
        problems.push(format!(
            "the transform uses an aggregate (or GROUP BY), whose value depends on other rows; \
             {rule}"
        ));
    }
    if flag("hasTargetSRFs") {
        problems.push(format!(
            "the transform calls a set-returning function, which makes several rows of one; \
             {rule}"
        ));
    }
    if flag("hasSubLinks") || !others.is_empty() || tree.contains(":rtekind 1 ") {
        let what = if others.is_empty() {
            String::new()
        } else {
            format!(" (it reads {})", others.join(", "))
        };
        problems.push(format!(
            "the transform uses a subquery or another table{what}, whose result changes \
             without the source row changing; {rule}"
        ));
    }
    if tree.contains(":varattno -") {
        problems.push(format!(
            "the transform reads a system column (ctid, xmin...), which belongs to where \
             walfill holds the row, not to the source row; {rule}"
        ));
    }
    for clause in [
        "distinctClause",
        "sortClause",
        "limitCount",
        "limitOffset",
        "setOperations",
        "cteList",
    ] {
        if used(clause) {
            problems.push(format!(
                "the transform is not a plain select list and filter (it has {clause}); {rule}"
            ));
        }
    }
    // Functions called directly and through operators (built-in ones have
    // no dependency rows, so the tree is where they show).
    let functions: Vec<u32> = [":funcid ", ":opfuncid "]
        .iter()
        .flat_map(|field| {
            tree.match_indices(field).filter_map(|(at, _)| {
                let digits: String = tree[at + field.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
        })
        .filter(|oid| *oid != 0)
        .collect();
    let volatile: Vec<String> = dest
        .query(
            "SELECT DISTINCT oid::regprocedure::text FROM pg_proc
              WHERE oid = ANY($1) AND provolatile = 'v' ORDER BY 1",
            &[&functions],
        )
        .await
        .map_err(|e| Error::destination("reading the transform's functions", e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let warnings = volatile
        .into_iter()
        .map(|f| {
            format!(
                "the transform calls the volatile function {f}: a row's derived value may \
                 differ between versions, and between a row copied and the same row replayed"
            )
        })
        .collect();
    Ok((problems, warnings, tree))
}

/// Creates the session's work table for `plan` (in a destination session
/// other than the one the plan was built in).
pub async fn create_work_table(dest: &Client, plan: &super::Plan) -> Result<()> {
    create_shaped(dest, WORK_TABLE, &plan.source, &plan.collations, true).await
}

/// Creates a temporary table with the source's columns, each under the
/// source column's collation (see `collation`; stored generated columns
/// recomputed from their expressions), plus walfill's bookkeeping columns
/// when `work` is set.
async fn create_shaped(
    dest: &Client,
    name: &str,
    table: &SourceTable,
    collations: &Collations,
    work: bool,
) -> Result<()> {
    let mut columns: Vec<String> = table
        .columns
        .iter()
        .map(|c| {
            let column = format!(
                "{} {}{}",
                quote_ident(&c.name),
                c.sql_type,
                collations.clause(&c.name)
            );
            match &c.generated {
                Some(expr) => format!("{column} GENERATED ALWAYS AS ({expr}) STORED"),
                None => column,
            }
        })
        .collect();
    if work {
        columns.extend(super::sql::work_columns(table, collations));
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

/// A transform's error, pointing at the place in the user's `select` or
/// `where` the server's position names, the way configuration errors do:
///
/// ```text
/// ERROR: column "x" does not exist [SQLSTATE 42703]
///     select = id, x + 1 AS y
///                  ^
/// ```
fn point_at(
    e: &tokio_postgres::Error,
    def: &Definition,
    select_at: usize,
    filter_at: usize,
) -> String {
    let Some(db) = e.as_db_error() else {
        return describe_pg_error(e);
    };
    let mut text = format!("{}: {}", db.severity(), db.message());
    if let Some(detail) = db.detail() {
        text.push_str(&format!(" (detail: {detail})"));
    }
    if let Some(hint) = db.hint() {
        text.push_str(&format!(" (hint: {hint})"));
    }
    text.push_str(&format!(" [SQLSTATE {}]", db.code().code()));
    let position = match db.position() {
        Some(tokio_postgres::error::ErrorPosition::Original(p)) => Some(*p as usize - 1),
        _ => None,
    };
    let mut show = |label: &str, value: &str, start: usize| {
        let value = value.replace(['\n', '\t'], " ");
        let offset = position
            .filter(|p| *p >= start && *p <= start + value.chars().count())
            .map(|p| p - start);
        text.push_str(&format!("\n    {label} = {value}"));
        if let Some(offset) = offset {
            text.push_str(&format!("\n    {}^", " ".repeat(label.len() + 3 + offset)));
        }
    };
    show("select", &def.select, select_at);
    if let Some(filter) = &def.filter {
        show("where", filter, filter_at);
    }
    text
}

/// A source table that cannot be used, as a problem for setup's list.
pub fn unusable(target: &str, e: &SnapshotError) -> Option<String> {
    matches!(e, SnapshotError::Unusable { .. }).then(|| format!("target {target}: {e}"))
}
