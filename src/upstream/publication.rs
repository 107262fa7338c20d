//! The publication a version's slot streams through.

use tokio_postgres::Client;
use walfill_core::sql::{quote_ident, quote_qualified};

use crate::error::{Error, Result};

/// What is wrong with publication `publication` for streaming every change
/// of table `relid`, each with its fix (in an order they can be run in):
/// the table must be in it, every operation published, no row filter and
/// no column list, and a partition must not be published as its root.
pub async fn publication_problems(
    source: &Client,
    publication: &str,
    relid: u32,
) -> Result<Vec<String>> {
    let failed = |e| Error::source_query("reading the publication", e);
    let table: (String, String, bool) = source
        .query_one(
            "SELECT n.nspname::text, c.relname::text, c.relispartition
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .map_err(failed)?;
    let quoted = quote_qualified(&table.0, &table.1);
    let pubname = quote_ident(publication);
    let Some(publ) = source
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot
               FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(failed)?
    else {
        return Ok(vec![format!(
            "publication {publication} does not exist; fix: run `walfill setup` (or CREATE \
             PUBLICATION {pubname} FOR TABLE {quoted})"
        )]);
    };
    let mut problems = Vec::new();
    let ops: Vec<&str> = ["insert", "update", "delete", "truncate"]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !publ.get::<_, bool>(*i))
        .map(|(_, op)| op)
        .collect();
    if !ops.is_empty() {
        problems.push(format!(
            "publication {publication} does not publish {}, so those changes would never \
             reach walfill's versions; fix: ALTER PUBLICATION {pubname} SET (publish = 'insert, \
             update, delete, truncate')",
            ops.join(", ")
        ));
    }
    if publ.get::<_, bool>(4) && table.2 {
        problems.push(format!(
            "publication {publication} publishes partitions as their root table \
             (publish_via_partition_root), so changes of the partition {quoted} would arrive \
             under another table; fix: ALTER PUBLICATION {pubname} SET \
             (publish_via_partition_root = false)"
        ));
    }
    let member = source
        .query_opt(
            "SELECT pt.rowfilter, pt.attnames,
                    ARRAY(SELECT attname::text FROM pg_attribute
                           WHERE attrelid = $2 AND attnum > 0 AND NOT attisdropped
                             AND attgenerated = '' ORDER BY attnum)
               FROM pg_publication_tables pt
              WHERE pt.pubname = $1 AND pt.schemaname = $3 AND pt.tablename = $4",
            &[&publication, &relid, &table.0, &table.1],
        )
        .await
        .map_err(failed)?;
    let Some(member) = member else {
        problems.push(format!(
            "publication {publication} does not include {}.{}; fix: ALTER PUBLICATION \
             {pubname} ADD TABLE {quoted} (as the table's owner), or run `walfill setup`",
            table.0, table.1
        ));
        return Ok(problems);
    };
    let refresh = format!(
        "ALTER PUBLICATION {pubname} DROP TABLE {quoted}; ALTER PUBLICATION {pubname} ADD \
         TABLE {quoted}"
    );
    if let Some(filter) = member.get::<_, Option<String>>(0) {
        problems.push(format!(
            "publication {publication} has a row filter on {}.{} (WHERE {filter}), so rows \
             outside it would never reach walfill's versions (and rows leaving it would \
             arrive as deletes); fix: {refresh}",
            table.0, table.1
        ));
    }
    let listed: Option<Vec<String>> = member.get(1);
    let all: Vec<String> = member.get(2);
    if let Some(listed) = listed.filter(|l| *l != all) {
        problems.push(format!(
            "publication {publication} has a column list on {}.{} ({}), so the other columns \
             would never reach walfill's versions; fix: {refresh}",
            table.0,
            table.1,
            listed.join(", ")
        ));
    }
    Ok(problems)
}

/// Fails with the fixes unless publication `publication` streams every
/// change of table `relid` (see [`publication_problems`]).
pub async fn require_publication(source: &Client, publication: &str, relid: u32) -> Result<()> {
    let problems = publication_problems(source, publication, relid).await?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Problems(problems))
    }
}
