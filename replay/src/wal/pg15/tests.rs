//! Crafted records for the PostgreSQL 15 layouts. The real-WAL checks are in
//! `wal::tests`.

use super::*;
use crate::lsn::Lsn;
use crate::wal::event::*;
use crate::wal::page::PgMajor;
use crate::wal::record::RelFileLocator;
use crate::wal::testutil::{record, Body};
use crate::wal::{interpret as interpret_any, DecodeErrorKind};

const REL: [u32; 3] = [1663, 5, 16385];

fn event(rmid: u8, info: u8, xid: u32, body: Body) -> Result<WalEvent, DecodeError> {
    event_in(PgMajor::Pg15, rmid, info, xid, body)
}

/// A record as PostgreSQL `major` would read it.
fn event_in(
    major: PgMajor,
    rmid: u8,
    info: u8,
    xid: u32,
    body: Body,
) -> Result<WalEvent, DecodeError> {
    let bytes = record(rmid, info, xid, Lsn(0x10), &body);
    let end = Lsn(0x2000 + bytes.len() as u64);
    let r = Record::parse(Lsn(0x2000), end, bytes).unwrap();
    interpret_any(&r, major)
}

fn le(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn commit_with_every_part() {
    let xinfo: u32 = 1 | 2 | 4 | 8 | 16 | 32 | 128 | 256;
    let main = le(&[
        &1000i64.to_le_bytes(),
        &xinfo.to_le_bytes(),
        &5u32.to_le_bytes(),
        &1663u32.to_le_bytes(),
        &2i32.to_le_bytes(),
        &801u32.to_le_bytes(),
        &802u32.to_le_bytes(),
        &1i32.to_le_bytes(),
        &[
            1663u32.to_le_bytes(),
            5u32.to_le_bytes(),
            16400u32.to_le_bytes(),
        ]
        .concat(),
        &1i32.to_le_bytes(),
        &[0u8; 12],
        &2i32.to_le_bytes(),
        &[0u8; 32],
        &800u32.to_le_bytes(),
        b"my-gid\0",
        &0x1234u64.to_le_bytes(),
        &2000i64.to_le_bytes(),
    ]);
    let WalEvent::Commit(c) = event(1, 0x80 | 0x30, 0, Body::new().main(&main)).unwrap() else {
        panic!("not a commit")
    };
    assert_eq!(c.xid, 800, "the prepared xid, not xl_xid");
    assert_eq!(c.subxacts, vec![801, 802]);
    assert_eq!(
        c.twophase,
        Some(TwoPhase {
            xid: 800,
            gid: Some(b"my-gid".to_vec())
        })
    );
    assert_eq!((c.db, c.tablespace), (Some(5), Some(1663)));
    assert_eq!(
        c.dropped_rels,
        vec![RelFileLocator {
            spc: 1663,
            db: 5,
            rel: 16400
        }]
    );
    assert_eq!(c.invalidations, 2);
    assert_eq!(c.xact_time, 1000);
    assert_eq!(c.commit_time, 2000, "origin timestamp wins");
    assert_eq!(c.origin.unwrap().lsn, Lsn(0x1234));
}

#[test]
fn commit_without_xinfo_and_subxact_abort() {
    let WalEvent::Commit(c) = event(1, 0x00, 77, Body::new().main(&5i64.to_le_bytes())).unwrap()
    else {
        panic!()
    };
    assert_eq!((c.xid, c.commit_time, c.db, c.xinfo), (77, 5, None, 0));
    let WalEvent::Abort(a) = event(1, 0x20, 78, Body::new().main(&6i64.to_le_bytes())).unwrap()
    else {
        panic!()
    };
    assert_eq!((a.xid, a.abort_time), (78, 6));
}

#[test]
fn truncated_commit_names_lsn_and_rmgr() {
    let main = le(&[
        &1i64.to_le_bytes(),
        &2u32.to_le_bytes(),
        &3i32.to_le_bytes(),
        &9u32.to_le_bytes(),
    ]);
    let e = event(1, 0x80, 1, Body::new().main(&main)).unwrap_err();
    assert_eq!(e.lsn, Lsn(0x2000));
    assert_eq!(e.rmgr, Some(RmgrId::XACT));
    assert!(
        matches!(
            e.kind,
            DecodeErrorKind::Truncated {
                need: 12,
                have: 4,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("(rmgr Transaction)"), "{e}");
    // Trailing bytes the flags do not explain are an error too.
    let main = le(&[&1i64.to_le_bytes(), &0u32.to_le_bytes(), &[1]]);
    assert!(event(1, 0x80, 1, Body::new().main(&main)).is_err());
}

#[test]
fn prepare_reads_gid_and_subxacts() {
    let mut main = vec![0u8; 72];
    main[0..4].copy_from_slice(&0x57F9_4534u32.to_le_bytes());
    main[8..12].copy_from_slice(&900u32.to_le_bytes());
    main[12..16].copy_from_slice(&5u32.to_le_bytes());
    main[16..24].copy_from_slice(&123i64.to_le_bytes());
    main[28..32].copy_from_slice(&2i32.to_le_bytes());
    main[54..56].copy_from_slice(&4u16.to_le_bytes());
    main.extend_from_slice(b"abc\0\0\0\0\0");
    main.extend_from_slice(&901u32.to_le_bytes());
    main.extend_from_slice(&902u32.to_le_bytes());
    main.extend_from_slice(&[0; 40]);
    let WalEvent::Prepare(p) = event(1, 0x10, 900, Body::new().main(&main)).unwrap() else {
        panic!()
    };
    assert_eq!(
        (p.xid, p.gid.as_slice(), p.db, p.prepared_at),
        (900, &b"abc"[..], 5, 123)
    );
    assert_eq!(p.subxacts, vec![901, 902]);
    assert_eq!(p.origin, None);
    main[0] = 0;
    assert!(matches!(
        event(1, 0x10, 900, Body::new().main(&main))
            .unwrap_err()
            .kind,
        DecodeErrorKind::Malformed { .. }
    ));
}

/// `xl_heap_header` + fragment.
fn tuple_bytes(natts: u16, data: &[u8]) -> Vec<u8> {
    le(&[&natts.to_le_bytes(), &0x0802u16.to_le_bytes(), &[24], data])
}

#[test]
fn insert_and_missing_block() {
    let main = le(&[&7u16.to_le_bytes(), &[0x08 | 0x04]]);
    let body = Body::new()
        .block(0, REL, 3, &tuple_bytes(2, b"\0abcd"))
        .main(&main);
    let WalEvent::Insert(i) = event(10, 0x80, 5, body).unwrap() else {
        panic!()
    };
    assert_eq!((i.block, i.offnum, i.init_page), (3, 7, true));
    assert!(i.is_speculative() && !i.on_toast_relation());
    let t = i.tuple.unwrap();
    assert_eq!(
        (t.natts(), t.infomask, t.hoff, t.data.as_slice()),
        (2, 0x0802, 24, &b"\0abcd"[..])
    );
    let e = event(10, 0x00, 5, Body::new().main(&main)).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::MissingBlock { id: 0 });
    // Without CONTAINS_NEW_TUPLE there is no tuple, whatever the block holds.
    let main = le(&[&7u16.to_le_bytes(), &[0]]);
    let WalEvent::Insert(i) =
        event(10, 0, 5, Body::new().block(0, REL, 3, b"x").main(&main)).unwrap()
    else {
        panic!()
    };
    assert!(i.tuple.is_none());
}

#[test]
fn update_with_old_key_and_prefix_compression() {
    let old = tuple_bytes(1, b"\0key");
    let head = |flags: u8| {
        le(&[
            &10u32.to_le_bytes(),
            &4u16.to_le_bytes(),
            &[0, flags],
            &0u32.to_le_bytes(),
            &9u16.to_le_bytes(),
        ])
    };
    let main = le(&[&head(0x08 | 0x10), &old]);
    let body = Body::new()
        .block(0, REL, 2, &tuple_bytes(1, b"\0new"))
        .block(1, REL, 1, b"")
        .main(&main);
    let WalEvent::Update(u) = event(10, 0x20, 10, body).unwrap() else {
        panic!()
    };
    assert_eq!(
        (u.hot, u.old_block, u.old_offnum, u.new_block, u.new_offnum),
        (false, 1, 4, 2, 9)
    );
    assert_eq!(u.old.unwrap().data, b"\0key");
    assert_eq!(u.new.unwrap().data, b"\0new");
    // Prefix compression on a logged new tuple cannot be decoded alone.
    let body = Body::new()
        .block(0, REL, 2, &tuple_bytes(1, b"\0new"))
        .main(&head(0x10 | 0x20));
    let e = event(10, 0x40, 10, body).unwrap_err();
    assert!(
        matches!(e.kind, DecodeErrorKind::NotDecodable { .. }),
        "{e}"
    );
    // A catalog update (no new tuple logged) with prefix compression is fine.
    let body = Body::new().block(0, REL, 2, b"\x03\0zz").main(&head(0x20));
    let WalEvent::Update(u) = event(10, 0x40, 10, body).unwrap() else {
        panic!()
    };
    assert!(u.hot && u.new.is_none() && u.old.is_none());
}

#[test]
fn multi_insert_offsets_and_even_alignment() {
    // Three tuples of odd lengths: headers must start at even offsets.
    let mut data = Vec::new();
    for (i, payload) in [&b"\0a"[..], b"\0bcd", b"\0e"].iter().enumerate() {
        if data.len() % 2 == 1 {
            data.push(0);
        }
        data.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        data.extend_from_slice(&(i as u16 + 1).to_le_bytes());
        data.extend_from_slice(&0u16.to_le_bytes());
        data.push(24);
        data.extend_from_slice(payload);
    }
    let main = le(&[&[0x08 | 0x02, 0], &3u16.to_le_bytes()]);
    let body = Body::new().block(0, REL, 0, &data).main(&main);
    let WalEvent::MultiInsert(m) = event(9, 0x80 | 0x50, 3, body).unwrap() else {
        panic!()
    };
    assert!(m.init_page && m.is_last_in_multi());
    assert_eq!(m.offsets, vec![1, 2, 3]);
    let datas: Vec<&[u8]> = m.tuples.iter().map(|t| t.data.as_slice()).collect();
    assert_eq!(datas, vec![&b"\0a"[..], b"\0bcd", b"\0e"]);
    assert_eq!(m.tuples[2].infomask2, 3);
    // Explicit offsets without INIT_PAGE.
    let main = le(&[
        &[0x08, 0],
        &3u16.to_le_bytes(),
        &5u16.to_le_bytes(),
        &6u16.to_le_bytes(),
        &7u16.to_le_bytes(),
    ]);
    let body = Body::new().block(0, REL, 0, &data).main(&main);
    let WalEvent::MultiInsert(m) = event(9, 0x50, 3, body).unwrap() else {
        panic!()
    };
    assert_eq!(m.offsets, vec![5, 6, 7]);
    // Block data longer than the tuples is malformed.
    let mut longer = data.clone();
    longer.push(1);
    let body = Body::new().block(0, REL, 0, &longer).main(&main);
    assert!(event(9, 0x50, 3, body).is_err());
}

#[test]
fn truncate_message_and_running_xacts() {
    let main = le(&[
        &5u32.to_le_bytes(),
        &2u32.to_le_bytes(),
        &[3, 0, 0, 0],
        &16384u32.to_le_bytes(),
        &16390u32.to_le_bytes(),
    ]);
    let WalEvent::Truncate(t) = event(10, 0x30, 1, Body::new().main(&main)).unwrap() else {
        panic!()
    };
    assert_eq!(
        (t.db, t.relids, t.cascade, t.restart_seqs),
        (5, vec![16384, 16390], true, true)
    );

    let msg = |prefix: &[u8]| {
        le(&[
            &5u32.to_le_bytes(),
            &[1, 0, 0, 0],
            &(prefix.len() as u64).to_le_bytes(),
            &3u64.to_le_bytes(),
            prefix,
            b"xyz",
        ])
    };
    let WalEvent::LogicalMessage(m) = event(21, 0, 1, Body::new().main(&msg(b"pre\0"))).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (
            m.db,
            m.transactional,
            m.prefix.as_slice(),
            m.payload.as_slice()
        ),
        (5, true, &b"pre"[..], &b"xyz"[..])
    );
    assert!(event(21, 0, 1, Body::new().main(&msg(b"pre!"))).is_err());

    let main = le(&[
        &1i32.to_le_bytes(),
        &1i32.to_le_bytes(),
        &[1, 0, 0, 0],
        &10u32.to_le_bytes(),
        &7u32.to_le_bytes(),
        &9u32.to_le_bytes(),
        &7u32.to_le_bytes(),
        &8u32.to_le_bytes(),
    ]);
    let WalEvent::RunningXacts(rx) = event(8, 0x10, 0, Body::new().main(&main)).unwrap() else {
        panic!()
    };
    assert_eq!(
        (rx.next_xid, rx.oldest_running_xid, rx.latest_completed_xid),
        (10, 7, 9)
    );
    assert_eq!(
        (rx.xids, rx.subxids, rx.subxid_overflow),
        (vec![7], vec![8], true)
    );
}

#[test]
fn other_records() {
    assert_eq!(
        event(11, 0x10, 0, Body::new()).unwrap(),
        WalEvent::Other {
            rmid: RmgrId(11),
            info: 0x10
        }
    );
    assert_eq!(event(0, 0x40, 0, Body::new()).unwrap(), WalEvent::Switch);
}

/// A record with main data `main` as PostgreSQL `major` would read it.
fn event_of(
    major: PgMajor,
    rmid: u8,
    info: u8,
    xid: u32,
    main: &[u8],
) -> Result<WalEvent, DecodeError> {
    event_in(major, rmid, info, xid, Body::new().main(main))
}

#[test]
fn end_of_recovery_grew_wal_level_in_17() {
    let v15 = le(&[
        &1i64.to_le_bytes(),
        &3u32.to_le_bytes(),
        &2u32.to_le_bytes(),
    ]);
    let v17 = le(&[&v15, &2i32.to_le_bytes(), &[0u8; 4]]);
    let expected = WalEvent::EndOfRecovery {
        timeline: 3,
        prev_timeline: 2,
    };
    for major in [PgMajor::Pg15, PgMajor::Pg16] {
        assert_eq!(event_of(major, 0, 0x90, 0, &v15).unwrap(), expected);
        assert!(event_of(major, 0, 0x90, 0, &v17).is_err(), "{major}");
    }
    for major in [PgMajor::Pg17, PgMajor::Pg18] {
        assert_eq!(event_of(major, 0, 0x90, 0, &v17).unwrap(), expected);
        assert!(event_of(major, 0, 0x90, 0, &v15).is_err(), "{major}");
    }
}

#[test]
fn dropped_stats_items_widened_in_18() {
    // A commit with dropped stats (xinfo 1 << 8) then invalidations (1 << 3).
    let commit = |item_len: usize| {
        let xinfo: u32 = (1 << 8) | (1 << 3);
        le(&[
            &9i64.to_le_bytes(),
            &xinfo.to_le_bytes(),
            &2i32.to_le_bytes(),
            &vec![7u8; 2 * item_len],
            &3i32.to_le_bytes(),
            &[0u8; 48],
        ])
    };
    let invalidations = |e: WalEvent| match e {
        WalEvent::Commit(c) => c.invalidations,
        other => panic!("{other:?}"),
    };
    for major in [PgMajor::Pg15, PgMajor::Pg16, PgMajor::Pg17] {
        assert_eq!(
            invalidations(event_of(major, 1, 0x80, 5, &commit(12)).unwrap()),
            3
        );
        assert!(event_of(major, 1, 0x80, 5, &commit(16)).is_err(), "{major}");
    }
    assert_eq!(
        invalidations(event_of(PgMajor::Pg18, 1, 0x80, 5, &commit(16)).unwrap()),
        3
    );
    assert!(event_of(PgMajor::Pg18, 1, 0x80, 5, &commit(12)).is_err());
}
