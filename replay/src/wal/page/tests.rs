use super::*;

const SEG: u32 = 1 << 20;

/// A header for `page`, long at segment starts.
fn header(page: u64, info: u16, rem_len: u32) -> Vec<u8> {
    let long = page % u64::from(SEG) == 0;
    let mut out = Vec::new();
    out.extend_from_slice(&0xD110u16.to_le_bytes());
    out.extend_from_slice(&(info | if long { XLP_LONG_HEADER } else { 0 }).to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&page.to_le_bytes());
    out.extend_from_slice(&rem_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    if long {
        out.extend_from_slice(&7u64.to_le_bytes());
        out.extend_from_slice(&SEG.to_le_bytes());
        out.extend_from_slice(&WAL_PAGE_SIZE.to_le_bytes());
    }
    out
}

fn check(bytes: &[u8], page: u64) -> Result<PageVerdict, DecodeError> {
    PageContext::default().check(bytes, Lsn(page), SEG)
}

#[test]
fn magic_maps_to_versions() {
    for major in [PgMajor::Pg15, PgMajor::Pg16, PgMajor::Pg17, PgMajor::Pg18] {
        assert_eq!(PgMajor::from_magic(major.magic()), Some(major));
    }
    assert_eq!(PgMajor::from_magic(0xD10D), None);
    assert_eq!(PgMajor::Pg16.to_string(), "16");
}

#[test]
fn accepts_long_and_short_headers() {
    let page = 3 * u64::from(SEG);
    let Ok(PageVerdict::Valid(h)) = check(&header(page, 0, 0), page) else {
        panic!("long header rejected");
    };
    assert_eq!(h.header_len(), LONG_HEADER_LEN);
    assert_eq!(h.long.unwrap().system_id, 7);
    let page = page + 8192;
    let Ok(PageVerdict::Valid(h)) = check(&header(page, XLP_FIRST_IS_CONTRECORD, 77), page) else {
        panic!("short header rejected");
    };
    assert_eq!(h.header_len(), SHORT_HEADER_LEN);
    assert!(h.is_contrecord());
    assert_eq!(h.rem_len, 77);
}

#[test]
fn zeroed_and_recycled_pages_end_the_wal() {
    assert_eq!(check(&[0; 40], 8192), Ok(PageVerdict::Zeroed));
    let old = header(8192, 0, 0);
    assert_eq!(
        check(&old, 8192 + u64::from(SEG)),
        Ok(PageVerdict::Recycled { found: Lsn(8192) })
    );
}

#[test]
fn rejects_bad_headers() {
    let mut bad_magic = header(8192, 0, 0);
    bad_magic[0] = 0x34;
    bad_magic[1] = 0x12;
    let e = check(&bad_magic, 8192).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::BadMagic { magic: 0x1234 });
    assert_eq!(e.lsn, Lsn(8192));
    assert!(e.to_string().contains("0x1234"), "{e}");
    assert!(e.to_string().contains("no PostgreSQL version's"), "{e}");
    for (magic, says) in [
        (0xD10D, "is PostgreSQL 14's"),
        (0xD101, "is PostgreSQL 12's"),
        (0xD120, "newer than 18"),
    ] {
        let mut page = header(8192, 0, 0);
        page[..2].copy_from_slice(&u16::to_le_bytes(magic));
        let e = check(&page, 8192).unwrap_err();
        assert!(e.to_string().contains(says), "{e}");
        assert!(e.to_string().contains("15, 16, 17 and 18"), "{e}");
    }

    let e = check(&header(16384, 0, 0), 8192).unwrap_err();
    assert_eq!(
        e.kind,
        DecodeErrorKind::BadPageAddress {
            expected: Lsn(8192),
            found: Lsn(16384)
        }
    );

    let e = check(&header(8192, 0x10, 0), 8192).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::InvalidPageInfo { info: 0x10 });

    let mut short_at_start = header(8192, 0, 0);
    short_at_start[8..16].copy_from_slice(&0u64.to_le_bytes());
    short_at_start.resize(40, 0);
    let e = check(&short_at_start, 0).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::MissingLongHeader);

    let mut wrong_size = header(0, 0, 0);
    wrong_size[32..36].copy_from_slice(&(2 * SEG).to_le_bytes());
    let e = check(&wrong_size, 0).unwrap_err();
    assert_eq!(
        e.kind,
        DecodeErrorKind::SegmentSizeMismatch {
            expected: SEG,
            found: 2 * SEG
        }
    );

    let mut wrong_page = header(0, 0, 0);
    wrong_page[36..40].copy_from_slice(&4096u32.to_le_bytes());
    let e = check(&wrong_page, 0).unwrap_err();
    assert!(matches!(
        e.kind,
        DecodeErrorKind::PageSizeMismatch { found: 4096, .. }
    ));
}

#[test]
fn later_pages_must_agree_with_earlier_ones() {
    let mut ctx = PageContext::default();
    ctx.check(&header(0, 0, 0), Lsn(0), SEG).unwrap();
    let mut other_version = header(8192, 0, 0);
    other_version[0..2].copy_from_slice(&0xD113u16.to_le_bytes());
    let e = ctx.check(&other_version, Lsn(8192), SEG).unwrap_err();
    assert!(matches!(e.kind, DecodeErrorKind::MagicChanged { .. }));

    let mut other_system = header(u64::from(SEG), 0, 0);
    other_system[24..32].copy_from_slice(&8u64.to_le_bytes());
    let e = ctx
        .check(&other_system, Lsn(u64::from(SEG)), SEG)
        .unwrap_err();
    assert!(matches!(e.kind, DecodeErrorKind::SystemIdMismatch { .. }));

    let mut ctx = PageContext {
        timeline: Some(2),
        ..PageContext::default()
    };
    let e = ctx.check(&header(8192, 0, 0), Lsn(8192), SEG).unwrap_err();
    assert_eq!(
        e.kind,
        DecodeErrorKind::TimelineRegressed {
            previous: 2,
            found: 1
        }
    );
}

#[test]
fn segment_sizes() {
    assert!(is_valid_segment_size(1 << 20));
    assert!(is_valid_segment_size(1 << 24));
    assert!(is_valid_segment_size(1 << 30));
    assert!(!is_valid_segment_size(1 << 19));
    assert!(!is_valid_segment_size(3 << 20));
    assert_eq!(header_len_at(Lsn(0), 1 << 20), LONG_HEADER_LEN);
    assert_eq!(header_len_at(Lsn(8192), 1 << 20), SHORT_HEADER_LEN);
}

#[test]
fn long_flag_where_a_short_header_is_due_reads_only_the_short_header() {
    // A mid-segment page with the long flag: for its own address, and left
    // over from an older segment start. The verdict comes from its first 24
    // bytes, whatever follows them.
    let page = 7 * u64::from(SEG) + 8192;
    let mut own = header(page, 0, 0);
    own[2..4].copy_from_slice(&XLP_LONG_HEADER.to_le_bytes());
    let old = header(u64::from(SEG), 0, 0);
    for (bytes, expected) in [
        (own, Err(DecodeErrorKind::UnexpectedLongHeader)),
        (
            old,
            Ok(PageVerdict::Recycled {
                found: Lsn(u64::from(SEG)),
            }),
        ),
    ] {
        for len in [24, 30, 40, 64] {
            let mut input = bytes.clone();
            input.resize(len, 0xEE);
            let got = check(&input, page).map_err(|e| e.kind);
            assert_eq!(got, expected, "{len} bytes");
        }
    }
}
