//! Record interpretation on the fixture, checked against what `pg_waldump`
//! printed for each record (its rmgr `desc` routines read the same fields).

use std::collections::BTreeMap;

use super::*;
use crate::wal::{interpret, PgMajor, WalEvent};

/// The decoded fixture: each record with its event and its `pg_waldump` line.
fn events() -> Vec<(Record, WalEvent, &'static DumpLine)> {
    let fx = basic();
    let (records, _) = decode_all(fx.start(), &fx.wal(), usize::MAX);
    assert_eq!(records.len(), fx.waldump.len());
    records
        .into_iter()
        .zip(&fx.waldump)
        .map(|(r, line)| {
            let event = interpret(&r, PgMajor::Pg15).unwrap_or_else(|e| panic!("{e}"));
            (r, event, line)
        })
        .collect()
}

/// The word after `key` in `desc`.
fn after<'a>(desc: &'a str, key: &str) -> &'a str {
    let from = desc
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {desc:?}"))
        + key.len();
    desc[from..]
        .split_whitespace()
        .next()
        .unwrap_or("")
        .trim_end_matches([';', ':', ','])
}

fn num<T: std::str::FromStr>(text: &str) -> T {
    text.parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

fn hex_u8(text: &str) -> u8 {
    u8::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex")
}

/// The xids listed after `key` up to the next `;`, or none.
fn xid_list(desc: &str, key: &str) -> Vec<u32> {
    match desc.find(key) {
        None => Vec::new(),
        Some(at) => desc[at + key.len()..]
            .split(';')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(num)
            .collect(),
    }
}

/// A timestamp (µs since 2000-01-01 UTC) as pg_waldump prints it with TZ=UTC.
fn waldump_time(us: i64) -> String {
    let secs = us.div_euclid(1_000_000) + 946_684_800;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:06} UTC",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        us.rem_euclid(1_000_000)
    )
}

/// The first word of a description, the record type.
fn kind(desc: &str) -> &str {
    desc.split_whitespace().next().unwrap_or("")
}

#[test]
fn every_record_interprets_and_event_counts_match_pg_waldump() {
    let mut ours: BTreeMap<&str, usize> = BTreeMap::new();
    let mut theirs: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, event, line) in events() {
        let name = match &event {
            WalEvent::Commit(_) => "commit",
            WalEvent::Abort(_) => "abort",
            WalEvent::Prepare(_) => "prepare",
            WalEvent::Assignment { .. } => "assignment",
            WalEvent::Invalidations { .. } => "invalidations",
            WalEvent::RunningXacts(_) => "running_xacts",
            WalEvent::Insert(_) => "insert",
            WalEvent::MultiInsert(_) => "multi_insert",
            WalEvent::Delete(_) => "delete",
            WalEvent::Update(_) => "update",
            WalEvent::Truncate(_) => "truncate",
            WalEvent::Confirm(_) => "confirm",
            WalEvent::LogicalMessage(_) => "message",
            WalEvent::SmgrCreate { .. } => "smgr_create",
            WalEvent::Switch => "switch",
            WalEvent::CheckpointShutdown(_) => "checkpoint_shutdown",
            WalEvent::EndOfRecovery { .. } => "end_of_recovery",
            WalEvent::ParameterChange { .. } => "parameter_change",
            WalEvent::Other { .. } => "other",
        };
        *ours.entry(name).or_default() += 1;
        let expected = match (line.rmgr.as_str(), kind(&line.desc)) {
            ("Transaction", "COMMIT" | "COMMIT_PREPARED") => "commit",
            ("Transaction", "ABORT" | "ABORT_PREPARED") => "abort",
            ("Transaction", "PREPARE") => "prepare",
            ("Transaction", "ASSIGNMENT") => "assignment",
            ("Transaction", "INVALIDATION") => "invalidations",
            ("Standby", "RUNNING_XACTS") => "running_xacts",
            ("Heap", "INSERT" | "INSERT+INIT") => "insert",
            ("Heap2", "MULTI_INSERT" | "MULTI_INSERT+INIT") => "multi_insert",
            ("Heap", "DELETE") => "delete",
            ("Heap", "UPDATE" | "HOT_UPDATE" | "UPDATE+INIT" | "HOT_UPDATE+INIT") => "update",
            ("Heap", "TRUNCATE") => "truncate",
            ("Heap", "HEAP_CONFIRM") => "confirm",
            ("LogicalMessage", "MESSAGE") => "message",
            ("Storage", "CREATE") => "smgr_create",
            ("XLOG", "SWITCH") => "switch",
            ("XLOG", "CHECKPOINT_SHUTDOWN") => "checkpoint_shutdown",
            ("XLOG", "END_OF_RECOVERY") => "end_of_recovery",
            ("XLOG", "PARAMETER_CHANGE") => "parameter_change",
            _ => "other",
        };
        assert_eq!(name, expected, "{} {}", line.lsn, line.desc);
        *theirs.entry(expected).or_default() += 1;
    }
    assert_eq!(ours, theirs);
    // The workload exercises each of these at least once.
    for needed in [
        "commit",
        "abort",
        "prepare",
        "assignment",
        "running_xacts",
        "insert",
        "multi_insert",
        "delete",
        "update",
        "truncate",
        "confirm",
        "message",
        "smgr_create",
        "switch",
        "checkpoint_shutdown",
    ] {
        assert!(
            ours.contains_key(needed),
            "no {needed} in the fixture: {ours:?}"
        );
    }
}

#[test]
fn transaction_events_match_pg_waldump() {
    let mut gids = BTreeMap::new();
    let mut checked = 0;
    for (record, event, line) in events() {
        let desc = &line.desc;
        match event {
            WalEvent::Commit(c) => {
                if kind(desc) == "COMMIT_PREPARED" {
                    let xid: u32 = num(after(desc, "COMMIT_PREPARED"));
                    assert_eq!(c.xid, xid, "{desc}");
                    assert_eq!(c.twophase.as_ref().map(|t| t.xid), Some(xid));
                    let gid = c
                        .twophase
                        .as_ref()
                        .and_then(|t| t.gid.clone())
                        .expect("gid logged");
                    assert_eq!(gids.get(&xid), Some(&gid), "gid of {xid}");
                    assert!(!c.subxacts.is_empty() || !desc.contains("subxacts"));
                } else {
                    assert_eq!(c.xid, record.xid);
                    assert!(c.twophase.is_none());
                }
                assert!(desc.contains(&waldump_time(c.commit_time)), "{desc}");
                assert_eq!(c.subxacts, xid_list(desc, "subxacts: "), "{desc}");
                // With wal_level=logical every commit names its database.
                assert!(c.db.is_some(), "{desc}");
                let rels: Vec<String> = c
                    .dropped_rels
                    .iter()
                    .map(|r| format!("base/{}/{}", r.db, r.rel))
                    .collect();
                if let Some(at) = desc.find("rels: ") {
                    let listed: Vec<&str> = desc[at + 6..]
                        .split(';')
                        .next()
                        .unwrap()
                        .split_whitespace()
                        .collect();
                    assert_eq!(rels, listed, "{desc}");
                }
                checked += 1;
            }
            WalEvent::Abort(a) => {
                if kind(desc) == "ABORT_PREPARED" {
                    let xid: u32 = num(after(desc, "ABORT_PREPARED"));
                    assert_eq!(a.xid, xid);
                    assert_eq!(
                        a.twophase.as_ref().and_then(|t| t.gid.clone()),
                        gids.get(&xid).cloned()
                    );
                } else {
                    assert_eq!(a.xid, record.xid);
                }
                assert!(desc.contains(&waldump_time(a.abort_time)), "{desc}");
                assert_eq!(a.subxacts, xid_list(desc, "subxacts: "), "{desc}");
                checked += 1;
            }
            WalEvent::Prepare(p) => {
                assert_eq!(p.xid, record.xid);
                let gid = after(desc, "gid ");
                assert_eq!(String::from_utf8_lossy(&p.gid), gid);
                assert!(desc.contains(&waldump_time(p.prepared_at)), "{desc}");
                assert_eq!(p.subxacts, xid_list(desc, "subxacts: "));
                gids.insert(p.xid, p.gid);
                checked += 1;
            }
            WalEvent::Assignment { top, subxacts } => {
                assert_eq!(top, num::<u32>(after(desc, "xtop")));
                assert_eq!(subxacts, xid_list(desc, "subxacts: "));
                assert_eq!(
                    record.toplevel_xid,
                    Some(top),
                    "assignment carries the top-level xid fragment"
                );
                checked += 1;
            }
            WalEvent::RunningXacts(rx) => {
                assert_eq!(rx.next_xid, num::<u32>(after(desc, "nextXid")));
                assert_eq!(
                    rx.latest_completed_xid,
                    num::<u32>(after(desc, "latestCompletedXid"))
                );
                assert_eq!(
                    rx.oldest_running_xid,
                    num::<u32>(after(desc, "oldestRunningXid"))
                );
                assert_eq!(rx.xids, xid_list(desc, "xacts: "));
                assert_eq!(rx.subxid_overflow, desc.contains("overflowed"));
                checked += 1;
            }
            _ => {}
        }
    }
    assert!(gids.len() >= 2 && checked > 20, "{checked} checked");
}

#[test]
fn heap_events_match_pg_waldump() {
    let (mut speculative, mut toast, mut old_images, mut multi_tuples) = (0, 0, 0, 0);
    for (record, event, line) in events() {
        let desc = &line.desc;
        match event {
            WalEvent::Insert(i) => {
                assert_eq!(i.offnum, num::<u16>(after(desc, "off")));
                assert_eq!(i.flags, hex_u8(after(desc, "flags")));
                assert_eq!(i.init_page, desc.starts_with("INSERT+INIT"));
                assert_eq!(i.tuple.is_some(), i.flags & 0x08 != 0);
                speculative += usize::from(i.is_speculative());
                toast += usize::from(i.on_toast_relation());
                if let Some(t) = &i.tuple {
                    assert!(
                        t.hoff >= 24 && t.data.len() >= usize::from(t.hoff) - 23,
                        "{desc}"
                    );
                }
            }
            WalEvent::Delete(d) => {
                assert_eq!(d.offnum, num::<u16>(after(desc, "off")));
                assert_eq!(d.flags, hex_u8(after(desc, "flags")));
                assert_eq!(d.old.is_some(), d.flags & 0x06 != 0);
                old_images += usize::from(d.old.is_some());
            }
            WalEvent::Update(u) => {
                assert_eq!(u.hot, desc.starts_with("HOT_UPDATE"));
                assert_eq!(u.old_offnum, num::<u16>(after(desc, "off")));
                assert_eq!(u.old_xmax, num::<u32>(after(desc, "xmax")));
                assert_eq!(u.flags, hex_u8(after(desc, "flags")));
                assert_eq!(u.new_offnum, num::<u16>(after(desc, "new off")));
                assert_eq!(u.new.is_some(), u.flags & 0x10 != 0);
                old_images += usize::from(u.old.is_some());
                assert_eq!(u.rel, record.blocks[0].rel);
            }
            WalEvent::Truncate(t) => {
                assert_eq!(t.relids, xid_list(desc, " relids "));
                assert_eq!(t.relids.len(), num::<usize>(after(desc, "nrelids")));
                assert_eq!(t.cascade, desc.contains(" cascade"));
                assert_eq!(t.restart_seqs, desc.contains("restart_seqs"));
                assert_eq!(t.relids.len(), 2);
            }
            WalEvent::Confirm(c) => assert_eq!(c.offnum, num::<u16>(after(desc, "off"))),
            WalEvent::MultiInsert(m) => {
                let word = if m.init_page {
                    "MULTI_INSERT+INIT"
                } else {
                    "MULTI_INSERT"
                };
                let n: usize = num(after(desc, word));
                assert_eq!(m.offsets.len(), n);
                assert_eq!(m.flags, hex_u8(after(desc, "flags")));
                if m.flags & 0x08 != 0 {
                    assert_eq!(m.tuples.len(), n);
                    multi_tuples += n;
                    // COPY rows "<id>\tcopied row <id>": ids ascend by one within a record.
                    let ids: Vec<u32> = m.tuples.iter().map(|t| copied_row_id(&t.data)).collect();
                    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
                } else {
                    assert!(m.tuples.is_empty());
                }
            }
            _ => {}
        }
    }
    assert!(
        speculative >= 1 && toast >= 10 && old_images >= 3,
        "{speculative} {toast} {old_images}"
    );
    assert_eq!(multi_tuples, 405, "all COPY rows");
}

/// The id at the end of a `copy_t` row's text column ("copied row <id>").
fn copied_row_id(data: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(data);
    let at = text.rfind("copied row ").expect("copied row text") + "copied row ".len();
    num(text[at..].trim_end_matches('\0'))
}

#[test]
fn other_events_match_pg_waldump() {
    let mut messages = Vec::new();
    for (_, event, line) in events() {
        let desc = &line.desc;
        match event {
            WalEvent::LogicalMessage(m) => {
                assert_eq!(m.transactional, desc.contains("MESSAGE transactional"));
                assert_eq!(
                    format!("\"{}\"", String::from_utf8_lossy(&m.prefix)),
                    after(desc, "prefix")
                );
                let hex: Vec<u8> = desc[desc.find("): ").unwrap() + 3..]
                    .split_whitespace()
                    .map(hex_u8)
                    .collect();
                // pg_waldump prints the whole payload.
                assert_eq!(m.payload, hex);
                messages.push((m.prefix, m.payload));
            }
            WalEvent::SmgrCreate { rel, fork } => {
                assert_eq!(rel.spc, 1663);
                let suffix = if fork.0 == 0 {
                    String::new()
                } else {
                    format!("_{fork}")
                };
                assert_eq!(
                    format!("base/{}/{}{suffix}", rel.db, rel.rel),
                    after(desc, "CREATE")
                );
            }
            WalEvent::CheckpointShutdown(c) => {
                assert_eq!(c.redo.to_string(), after(desc, "redo"));
                assert_eq!(c.timeline, num::<u32>(after(desc, "tli")));
                let xid = format!(
                    "{}:{}",
                    c.next_full_xid >> 32,
                    c.next_full_xid & 0xFFFF_FFFF
                );
                assert_eq!(xid, after(desc, "xid"));
                assert_eq!(
                    c.oldest_active_xid,
                    num::<u32>(after(desc, "oldest running xid"))
                );
            }
            _ => {}
        }
    }
    assert!(messages.contains(&(b"p".to_vec(), b"x".to_vec())));
}
