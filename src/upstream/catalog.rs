//! The decoder's catalog read from the live database: every permanent user
//! table with its storage layout, types (enum labels, range subtypes,
//! composite attributes) and replica identity.
//!
//! This describes relations as they are *now*; decoding WAL written before a
//! schema change needs the catalog journal instead.

use std::collections::HashMap;

use tokio_postgres::Client;
use walfill_replay::decode::{Catalog, NewRelation, RelationSchema, TypeAttr, TypeRow, TypeRows};
use walfill_replay::tuple::{Align, AttrSchema, RelSchema, Storage};
use walfill_replay::types::TypeInfo;
use walfill_replay::wal::RelFileLocator;

use crate::error::{Error, Result};

/// `FirstNormalObjectId`: OIDs below are the system's own objects.
const FIRST_USER_OID: u32 = 16384;
/// `pg_default`, the tablespace a database's relations use unless told otherwise.
const DEFAULT_TABLESPACE: u32 = 1663;

/// Reads the catalog of the database `client` is connected to.
pub async fn load(client: &Client) -> Result<Catalog> {
    load_where(client, None).await
}

/// The current description of table `relid`, if it is one the catalog
/// journal would describe.
pub async fn describe(client: &Client, relid: u32) -> Result<Option<NewRelation>> {
    Ok(load_where(client, Some(relid))
        .await?
        .by_oid(relid)
        .map(|r| r.spec.clone()))
}

async fn load_where(client: &Client, only: Option<u32>) -> Result<Catalog> {
    let failed = |what: &'static str| move |e| Error::source_query(what, e);
    let db = client
        .query_one(
            "SELECT oid, dattablespace FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .await
        .map_err(failed("reading the database's OID"))?;
    let database: u32 = db.get(0);
    let db_tablespace: u32 = db.get(1);
    let types = load_types(client).await?;

    let relations = client
        .query(
            "SELECT c.oid, n.nspname::text, c.relname::text, pg_relation_filenode(c.oid),
                    c.reltablespace, c.relreplident::text,
                    CASE WHEN c.reltoastrelid <> 0 THEN pg_relation_filenode(c.reltoastrelid) END,
                    t.reltablespace
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
              WHERE c.relkind IN ('r', 'm') AND c.relpersistence = 'p' AND c.oid >= $1
                AND ($2::oid IS NULL OR c.oid = $2)",
            &[&FIRST_USER_OID, &only],
        )
        .await
        .map_err(failed("reading relations"))?;
    let attributes = client
        .query(
            "SELECT a.attrelid, a.attnum, a.attname::text, a.atttypid, a.atttypmod, a.attlen,
                    a.attbyval, a.attalign::text, a.attstorage::text, a.attisdropped,
                    CASE WHEN a.atthasmissing THEN a.attmissingval::text END,
                    CASE WHEN a.attisdropped THEN '' ELSE format_type(a.atttypid, NULL) END,
                    a.attgenerated::text
               FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
              WHERE a.attnum > 0 AND c.relkind IN ('r', 'm') AND c.relpersistence = 'p'
                AND c.oid >= $1 AND ($2::oid IS NULL OR c.oid = $2)
              ORDER BY a.attrelid, a.attnum",
            &[&FIRST_USER_OID, &only],
        )
        .await
        .map_err(failed("reading columns"))?;
    let keys = client
        .query(
            "SELECT c.oid, array_agg(a.attname::text ORDER BY k.ord)
               FROM pg_class c
               JOIN pg_index i ON i.indrelid = c.oid
                AND ((c.relreplident = 'd' AND i.indisprimary)
                  OR (c.relreplident = 'i' AND i.indisreplident))
               CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
              WHERE c.oid >= $1 AND ($2::oid IS NULL OR c.oid = $2)
              GROUP BY c.oid",
            &[&FIRST_USER_OID, &only],
        )
        .await
        .map_err(failed("reading replica identities"))?;
    let keys: HashMap<u32, Vec<String>> = keys.iter().map(|r| (r.get(0), r.get(1))).collect();

    let mut columns: HashMap<u32, Vec<(AttrSchema, Option<TypeInfo>, String)>> = HashMap::new();
    for a in &attributes {
        let dropped: bool = a.get(9);
        let type_oid: u32 = a.get(3);
        let missing: Option<String> = a.get(10);
        let attr = AttrSchema {
            name: a.get(2),
            attnum: a.get(1),
            type_oid,
            typmod: a.get(4),
            len: a.get(5),
            byval: a.get(6),
            align: Align::from_code(code(a.get(7))).unwrap_or(Align::Int),
            storage: Storage::from_code(code(a.get(8))).unwrap_or(Storage::Plain),
            dropped,
            missing: missing.as_deref().and_then(first_array_element),
            generated: !a.get::<_, String>(12).is_empty(),
        };
        let ty = (!dropped).then(|| types.info(type_oid));
        columns
            .entry(a.get(0))
            .or_default()
            .push((attr, ty, a.get(11)));
    }

    let tablespace = |spc: u32| {
        if spc == 0 {
            db_tablespace.max(DEFAULT_TABLESPACE)
        } else {
            spc
        }
    };
    let mut catalog = Catalog::new(database);
    for r in &relations {
        let oid: u32 = r.get(0);
        let Some(relfilenode) = r.get::<_, Option<u32>>(3) else {
            continue;
        };
        let cols = columns.remove(&oid).unwrap_or_default();
        let replident: String = r.get(5);
        let toast_file = r.get::<_, Option<u32>>(6).map(|rel| RelFileLocator {
            spc: tablespace(r.get::<_, Option<u32>>(7).unwrap_or(0)),
            db: database,
            rel,
        });
        let mut attrs = Vec::with_capacity(cols.len());
        let mut infos = Vec::with_capacity(cols.len());
        let mut names = Vec::with_capacity(cols.len());
        for (attr, ty, name) in cols {
            attrs.push(attr);
            infos.push(ty);
            names.push(name);
        }
        catalog.insert(RelationSchema::new(NewRelation {
            oid,
            schema: r.get(1),
            name: r.get(2),
            file: RelFileLocator {
                spc: tablespace(r.get(4)),
                db: database,
                rel: relfilenode,
            },
            toast_file,
            attrs: RelSchema { attrs },
            types: infos,
            type_names: names,
            key: keys.get(&oid).cloned().unwrap_or_default(),
            full_identity: replident == "f",
        }));
    }
    // Partitioned tables have no storage; TRUNCATE records name them.
    let partitioned = client
        .query(
            "SELECT c.oid, n.nspname::text, c.relname::text
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind = 'p' AND c.relpersistence = 'p' AND c.oid >= $1
                AND ($2::oid IS NULL OR c.oid = $2)",
            &[&FIRST_USER_OID, &only],
        )
        .await
        .map_err(failed("reading partitioned tables"))?;
    for row in &partitioned {
        catalog.insert_partitioned(row.get(0), row.get(1), row.get(2));
    }
    Ok(catalog)
}

fn code(text: String) -> u8 {
    text.bytes().next().unwrap_or(b'?')
}

/// The one element of a `{...}` array literal, as its type printed it.
fn first_array_element(literal: &str) -> Option<String> {
    let inner = literal.strip_prefix('{')?.strip_suffix('}')?;
    if !inner.starts_with('"') {
        return (inner != "NULL").then(|| inner.to_string());
    }
    let mut out = String::new();
    let mut chars = inner[1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// Every type of the database (with enum labels, what a range or
/// multirange ranges over, the attributes of composite types, and the
/// built-in output function of a user-defined base type).
async fn load_types(client: &Client) -> Result<TypeRows> {
    let mut labels: HashMap<u32, Vec<(u32, String)>> = HashMap::new();
    for r in client
        .query(
            "SELECT enumtypid, oid, enumlabel::text FROM pg_enum ORDER BY enumsortorder",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading enum labels", e))?
    {
        labels
            .entry(r.get(0))
            .or_default()
            .push((r.get(1), r.get(2)));
    }
    let mut attrs: HashMap<u32, Vec<TypeAttr>> = HashMap::new();
    for r in client
        .query(
            "SELECT t.oid, a.atttypid, a.attlen, a.attbyval, a.attalign::text, a.attisdropped
               FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
              WHERE t.typtype = 'c' AND a.attnum > 0
              ORDER BY t.oid, a.attnum",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading the attributes of composite types", e))?
    {
        attrs.entry(r.get(0)).or_default().push(TypeAttr {
            typid: r.get(1),
            len: r.get(2),
            byval: r.get(3),
            align: r.get(4),
            dropped: r.get(5),
        });
    }
    let rows = client
        .query(
            "SELECT t.oid, format_type(t.oid, NULL), t.typtype::text, t.typlen, t.typbyval,
                    t.typalign::text, t.typelem, t.typbasetype, t.typdelim::text,
                    t.typsubscript = 'array_subscript_handler'::regproc,
                    r.rngsubtype, m.rngtypid,
                    CASE WHEN t.typtype = 'b' AND t.oid >= $1 AND l.lanname = 'internal'
                         THEN p.prosrc END
               FROM pg_type t
               LEFT JOIN pg_range r ON r.rngtypid = t.oid
               LEFT JOIN pg_range m ON m.rngmultitypid = t.oid
               LEFT JOIN pg_proc p ON p.oid = t.typoutput
               LEFT JOIN pg_language l ON l.oid = p.prolang",
            &[&FIRST_USER_OID],
        )
        .await
        .map_err(|e| Error::source_query("reading types", e))?;
    Ok(TypeRows::new(rows.iter().map(|r| {
        let oid: u32 = r.get(0);
        TypeRow {
            oid,
            name: r.get(1),
            kind: r.get(2),
            len: r.get(3),
            byval: r.get(4),
            align: r.get(5),
            elem: r.get(6),
            base: r.get(7),
            delim: r.get(8),
            is_array: r.get(9),
            labels: labels.remove(&oid).unwrap_or_default(),
            subtype: r.get(10),
            range: r.get(11),
            attrs: attrs.remove(&oid),
            output: r.get(12),
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::first_array_element;

    #[test]
    fn missing_values_come_out_of_their_array() {
        assert_eq!(first_array_element("{5}").as_deref(), Some("5"));
        assert_eq!(
            first_array_element(r#"{"a \"b\" \\c"}"#).as_deref(),
            Some(r#"a "b" \c"#)
        );
        assert_eq!(first_array_element("{NULL}"), None);
        assert_eq!(first_array_element(r#"{"NULL"}"#).as_deref(), Some("NULL"));
        assert_eq!(first_array_element("{t}").as_deref(), Some("t"));
    }
}
