//! Seeds for the value decoders: tuples logged in the fixtures' WAL (with
//! the TOAST chunks their transaction logged), and the stored datums of the
//! type test vectors.

use std::collections::{BTreeMap, HashMap};

use walfill_fuzz::datum::{self, TypeSel, ENUM_LABELS};
use walfill_fuzz::tuple::{self as fz, attr, base_desc, DROPPED};
use walfill_replay::tuple::{deform, detoast_inline, RawDatum, RelSchema, Varlena};
use walfill_replay::types::BaseType;
use walfill_replay::wal::{interpret, PgMajor, Record, TupleFragment, WalEvent};

use crate::Seeds;

/// Seeds kept per tuple shape (attribute count and schema).
const PER_SHAPE: usize = 6;

/// Schemas tried for a logged tuple with this many attributes: the tables
/// of the fixtures' workload are `(int, text)`, `(int, text, int)` and
/// `(int, text, text)`.
fn candidates(natts: u16) -> Vec<Vec<u8>> {
    let int4 = base_desc(BaseType::Int4);
    let text = base_desc(BaseType::Text);
    match natts {
        1 => vec![vec![int4]],
        2 => vec![vec![int4, text]],
        3 => vec![vec![int4, text, int4], vec![int4, text, text]],
        _ => Vec::new(),
    }
}

/// The schema a logged tuple decodes under, and the TOAST values it points to.
fn fit(f: &TupleFragment) -> Option<(Vec<u8>, Vec<u32>)> {
    'schemas: for descs in candidates(f.natts()) {
        let schema = RelSchema {
            attrs: descs
                .iter()
                .zip(1..)
                .map(|(&d, n)| attr(d, n).schema)
                .collect(),
        };
        let Ok(datums) = deform(f.infomask2, f.infomask, f.hoff, &f.data, &schema) else {
            continue;
        };
        let mut external = Vec::new();
        for d in &datums {
            match d {
                RawDatum::Varlena(Varlena::External(p)) => external.push(p.value_id),
                RawDatum::Varlena(v) if detoast_inline(v).is_err() => continue 'schemas,
                _ => {}
            }
        }
        return Some((descs, external));
    }
    None
}

/// `tuple` seeds from the row events of `records`.
pub(crate) fn tuple_seeds(label: &str, records: &[Record], seeds: &mut Seeds) {
    // TOAST chunk rows by xid, as logged.
    let mut chunks: HashMap<u32, Vec<TupleFragment>> = HashMap::new();
    let mut per_shape: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for r in records {
        let Ok(event) = interpret(r, PgMajor::Pg15) else {
            continue;
        };
        let tuples: Vec<&TupleFragment> = match &event {
            WalEvent::Insert(i) if i.on_toast_relation() => {
                chunks
                    .entry(r.xid)
                    .or_default()
                    .extend(i.tuple.iter().cloned());
                continue;
            }
            WalEvent::Insert(i) => i.tuple.iter().collect(),
            WalEvent::MultiInsert(m) => m.tuples.iter().take(2).collect(),
            WalEvent::Update(u) => u.old.iter().chain(u.new.iter()).collect(),
            WalEvent::Delete(d) => d.old.iter().collect(),
            _ => continue,
        };
        for (i, f) in tuples.into_iter().enumerate() {
            let Some((descs, external)) = fit(f) else {
                continue;
            };
            let n = per_shape.entry(descs.clone()).or_default();
            if *n >= PER_SHAPE && external.is_empty() {
                continue;
            }
            *n += 1;
            let logged: Vec<TupleFragment> = chunks
                .get(&r.xid)
                .map(|c| {
                    c.iter()
                        .filter(|c| chunk_id(c).is_some_and(|id| external.contains(&id)))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            let name = format!("{label}-{}-{i}", r.lsn).replace('/', "_");
            seeds.add("tuple", name.clone(), fz::encode(&logged, &descs, f));
            // The same tuple with a column added later and one dropped.
            let mut wider = descs.clone();
            wider.push(base_desc(BaseType::Numeric));
            if let Some(last) = wider.get_mut(descs.len() - 1) {
                *last |= DROPPED;
            }
            seeds.add(
                "tuple",
                format!("{name}-wider"),
                fz::encode(&logged, &wider, f),
            );
        }
    }
}

/// The `chunk_id` of a TOAST chunk row.
fn chunk_id(f: &TupleFragment) -> Option<u32> {
    walfill_replay::tuple::decode_chunk(f.infomask2, f.infomask, f.hoff, &f.data)
        .ok()
        .map(|c| c.chunk_id)
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd hex length: {s}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("{s}: {e}")))
        .collect()
}

/// The selector of a vector's type spec (`b:OID`, `domain:OID:BASE`,
/// `domainarr:OID:DOMAIN:BASE`, `enum:OID`), if the harness has it.
fn type_sel(spec: &str) -> Option<TypeSel> {
    let parts: Vec<&str> = spec.split(':').collect();
    let base = |s: &str| s.parse().ok().and_then(BaseType::from_oid);
    match parts[..] {
        ["b", oid] => base(oid).map(TypeSel::Base).or_else(|| {
            let oid: u32 = oid.parse().ok()?;
            BaseType::ALL
                .into_iter()
                .find(|b| b.array_oid() == oid)
                .map(TypeSel::Array)
        }),
        ["domain", _, b] => base(b).map(TypeSel::Domain),
        ["domainarr", _, _, b] => base(b).map(TypeSel::DomainArray),
        ["enum", _] => Some(TypeSel::Enum),
        _ => None,
    }
}

/// The datum `output` takes: varlena payloads lose their 1- or 4-byte header.
fn payload(stored: &[u8], varlena: bool) -> Option<&[u8]> {
    if !varlena {
        return Some(stored);
    }
    let first = *stored.first()?;
    if first & 1 == 1 {
        stored.get(1..)
    } else {
        stored.get(4..)
    }
}

/// `datum` seeds, and one-column `tuple` seeds, from the type test vectors.
pub(crate) fn vector_seeds(text: &str, seeds: &mut Seeds) -> Result<(), String> {
    let mut enum_values = 0usize;
    for (n, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        if line.starts_with('#') || fields.len() != 5 {
            continue;
        }
        let Some(sel) = type_sel(fields[0]) else {
            continue;
        };
        let mut stored = unhex(fields[3])?;
        if sel == TypeSel::Enum {
            // Stored enum values are pg_enum OIDs; use the harness's labels.
            stored = ENUM_LABELS[enum_values % ENUM_LABELS.len()]
                .0
                .to_le_bytes()
                .to_vec();
            enum_values += 1;
        }
        let selector = datum::selector(sel);
        let ty = &datum::types()[usize::from(selector)];
        let Some(value) = payload(&stored, ty.is_varlena()) else {
            continue;
        };
        let name = format!("vec{n}-{}", fields[0].replace(':', "_"));
        seeds.add("datum", name.clone(), datum::encode(sel, value));
        // One attribute of this type, after one byte of header padding.
        let tuple = TupleFragment {
            infomask2: 1,
            infomask: 0,
            hoff: 24,
            data: [&[0u8][..], &stored].concat(),
        };
        seeds.add("tuple", name, fz::encode(&[], &[selector], &tuple));
    }
    Ok(())
}
