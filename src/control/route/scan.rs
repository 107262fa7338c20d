//! A fast pass over archived WAL that follows only transactions and the
//! catalog journal: which tables were created where, their schemas, which
//! ones the journal lost track of, and where decoding may restart.

use walfill_core::Lsn;
use walfill_replay::archive::{Archive, ReadOptions};
use walfill_replay::decode::{
    Catalog, Creation, DecodeOptions, Decoder, Discard, Identity, LostRelation, NewRelation,
    RelationSchema,
};
use walfill_replay::TimelineId;

use crate::error::{Error, Gap, Result};
use crate::pipeline::base::decode_summarized;

/// What a journal scan found.
#[derive(Debug)]
pub struct Scan {
    /// Tables as of the end of the scanned WAL.
    pub catalog: Catalog,
    /// Tables whose creation was seen, by OID.
    pub created: rustc_hash::FxHashMap<u32, Creation>,
    /// Tables the journal lost track of.
    pub lost: Vec<LostRelation>,
    /// Running-xacts records: `(LSN, next xid)`.
    pub restart_points: Vec<(Lsn, u32)>,
    /// The end of the WAL read.
    pub end: Lsn,
}

impl Scan {
    /// The scan of WAL not archived yet: what is known, nothing more.
    pub fn nothing(database: u32, known: Option<&NewRelation>, at: Lsn) -> Scan {
        Scan {
            catalog: seeded(database, known),
            created: Default::default(),
            lost: Vec::new(),
            restart_points: Vec::new(),
            end: at,
        }
    }
}

fn seeded(database: u32, known: Option<&NewRelation>) -> Catalog {
    let mut catalog = Catalog::new(database);
    if let Some(relation) = known {
        catalog.insert(RelationSchema::new(relation.clone()));
    }
    catalog
}

/// Scans the WAL of database `database` in the archive from `from` to the
/// end of the archive (or `to`), starting with the tables of `known` (the
/// relation of a base snapshot). WAL that is not `identity`'s is an error.
/// Segments whose summary (in `summaries`, when given) can stand in for
/// them are not read; those read whole that had none are summarized.
pub async fn scan_journal(
    (archive, summaries): (&Archive, Option<&Archive>),
    database: u32,
    identity: &Identity,
    known: Option<&NewRelation>,
    from: Lsn,
    to: Option<Lsn>,
) -> Result<Scan> {
    let identity = identity.clone();
    let catalog = seeded(database, known);
    let runtime = tokio::runtime::Handle::current();
    let archive = archive.clone();
    let summaries = summaries.cloned();
    tokio::task::spawn_blocking(move || {
        let follow = ReadOptions::default().following(TimelineId(identity.timeline));
        let options = DecodeOptions {
            only: Some(Default::default()),
            journal_only: true,
            strict_types: false,
            identity: Some(identity),
            ..DecodeOptions::default()
        };
        let mut decoder = Decoder::new(catalog, options);
        let started = std::time::Instant::now();
        let fed = decode_summarized(
            &runtime,
            &archive,
            (from, to),
            follow,
            summaries.map(|store| (store, database)),
            (&mut decoder, &mut Discard),
        );
        let fed = fed.map_err(|e| Error::History(Gap::Wal(Box::new(e))))?;
        tracing::info!(
            %from,
            end = %fed.end,
            wal_mib = fed.wal_bytes / (1024 * 1024),
            segments_read = fed.segments,
            segments_summarized = fed.summarized,
            seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
            "read the catalog journal in the archived WAL"
        );
        Ok(Scan {
            created: decoder.created().clone(),
            lost: decoder.lost().to_vec(),
            restart_points: decoder.restart_points().to_vec(),
            catalog: decoder.catalog().clone(),
            end: fed.end,
        })
    })
    .await
    .map_err(|e| Error::Internal(format!("the journal scan failed: {e}")))?
}
