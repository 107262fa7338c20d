//! Property tests: input splitting never changes the result, and no input makes the decoder panic.

use proptest::prelude::*;

use super::*;
use crate::wal::{interpret, PgMajor};

/// Decodes `wal` cut at the given points (sorted and clamped); records and the final answer.
fn decode_split(
    start: Lsn,
    wal: &[u8],
    mut cuts: Vec<usize>,
) -> (Vec<Record>, Result<Poll, crate::wal::DecodeError>) {
    cuts.iter_mut().for_each(|c| *c %= wal.len() + 1);
    cuts.push(wal.len());
    cuts.sort_unstable();
    let mut d = WalDecoder::new(start, SEG);
    let mut records = Vec::new();
    let mut from = 0;
    let mut next_cut = cuts.into_iter();
    loop {
        match d.poll() {
            Ok(Poll::Record(r)) => records.push(r),
            Ok(Poll::NeedMore) => match next_cut.next() {
                Some(to) => {
                    d.feed(&wal[from..to]);
                    from = to;
                }
                None => return (records, Ok(Poll::NeedMore)),
            },
            other => return (records, other),
        }
    }
}

/// Polls until the decoder stops making progress, interpreting every record.
fn drain(d: &mut WalDecoder) {
    for _ in 0..100_000 {
        match d.poll() {
            Ok(Poll::Record(r)) => {
                let _ = interpret(&r, PgMajor::Pg15);
            }
            _ => return,
        }
    }
    panic!("decoder did not stop");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_split_of_the_fixture_gives_the_same_records(
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let fx = basic();
        let wal = fx.wal();
        static WHOLE: OnceLock<(Vec<Record>, Poll)> = OnceLock::new();
        let whole = WHOLE.get_or_init(|| decode_all(fx.start(), &fx.wal(), usize::MAX));
        let (records, last) = decode_split(fx.start(), &wal, cuts);
        prop_assert_eq!(&records, &whole.0);
        prop_assert_eq!(last, Ok(whole.1.clone()));
    }

    #[test]
    fn damaged_fixture_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        chunk in 1usize..20_000,
    ) {
        let fx = basic();
        let mut wal = fx.segments[0].1.clone();
        wal.truncate(200_000);
        for (at, value) in edits {
            let i = at.index(wal.len());
            wal[i] = value;
        }
        let mut d = WalDecoder::new(fx.start(), SEG);
        for piece in wal.chunks(chunk) {
            d.feed(piece);
            drain(&mut d);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
        start_page in 0u64..300,
        start_offset in 0u64..1024,
        segment_size in prop::sample::select(vec![1u32 << 20, 1 << 24, 12345]),
        chunk in 1usize..5000,
    ) {
        let start = Lsn(start_page * 8192 + start_offset * 8);
        let mut d = WalDecoder::new(start, segment_size);
        for piece in bytes.chunks(chunk) {
            d.feed(piece);
            drain(&mut d);
        }
    }

    #[test]
    fn arbitrary_bytes_behind_a_valid_page_header_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..9000),
        rem_len in prop::sample::select(vec![0u32, 8, 100, 9000, u32::MAX]),
        info in 0u16..16,
    ) {
        let mut page = Vec::new();
        page.extend_from_slice(&0xD110u16.to_le_bytes());
        page.extend_from_slice(&(info | 2).to_le_bytes());
        page.extend_from_slice(&1u32.to_le_bytes());
        page.extend_from_slice(&0u64.to_le_bytes());
        page.extend_from_slice(&rem_len.to_le_bytes());
        page.extend_from_slice(&[0; 4]);
        page.extend_from_slice(&9u64.to_le_bytes());
        page.extend_from_slice(&SEG.to_le_bytes());
        page.extend_from_slice(&8192u32.to_le_bytes());
        page.extend_from_slice(&body);
        let mut d = WalDecoder::new(Lsn(0), SEG);
        d.feed(&page);
        drain(&mut d);
    }

    #[test]
    fn arbitrary_record_bodies_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..600),
        rmid in 0u8..23,
        info in any::<u8>(),
    ) {
        let mut bytes = ((24 + body.len()) as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&7u32.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&[info, rmid, 0, 0, 0, 0, 0, 0]);
        bytes.extend_from_slice(&body);
        if let Ok(record) = Record::parse(Lsn(64), Lsn(64 + bytes.len() as u64), bytes) {
            let _ = interpret(&record, PgMajor::Pg15);
        }
    }

    #[test]
    fn arbitrary_main_data_never_panics(
        main in proptest::collection::vec(any::<u8>(), 0..300),
        block_data in proptest::collection::vec(any::<u8>(), 0..300),
        rmid in prop::sample::select(vec![0u8, 1, 2, 8, 9, 10, 21]),
        info in any::<u8>(),
    ) {
        use crate::wal::testutil::{record, Body};
        let body = Body::new().block(0, [1663, 5, 16384], 3, &block_data).main(&main);
        let bytes = record(rmid, info, 7, Lsn(0), &body);
        let record = Record::parse(Lsn(64), Lsn(64 + bytes.len() as u64), bytes).unwrap();
        let _ = interpret(&record, PgMajor::Pg15);
    }
}
