use super::*;
use crate::archive::tests::pack;

/// A long page header as PostgreSQL 15 writes it at a segment start.
fn long_header(segment_size: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0xD110u16.to_le_bytes()); // xlp_magic
    h.extend_from_slice(&2u16.to_le_bytes()); // xlp_info: XLP_LONG_HEADER
    h.extend_from_slice(&1u32.to_le_bytes()); // xlp_tli
    h.extend_from_slice(&0x0700_0000u64.to_le_bytes()); // xlp_pageaddr
    h.extend_from_slice(&0u32.to_le_bytes()); // xlp_rem_len
    h.extend_from_slice(&0u32.to_le_bytes()); // padding
    h.extend_from_slice(&42u64.to_le_bytes()); // xlp_sysid
    h.extend_from_slice(&segment_size.to_le_bytes()); // xlp_seg_size
    h.extend_from_slice(&8192u32.to_le_bytes()); // xlp_xlog_blcksz
    h
}

fn all_codecs() -> impl Iterator<Item = Codec> {
    std::iter::once(Codec::Plain).chain(Codec::COMPRESSED)
}

#[test]
fn segment_size_from_the_head_of_every_codec() {
    for size in [1 << 20, 16 << 20] {
        let mut segment = long_header(size);
        segment.resize(300 * 1024, 7);
        for codec in all_codecs() {
            let packed = pack(codec, &segment);
            assert_eq!(
                segment_size_in_header(&packed, codec).unwrap(),
                size,
                "{codec}"
            );
            // The prefix that the listing fetches is enough.
            if let Some(len) = codec.head_len() {
                let short = &packed[..packed.len().min(len as usize)];
                assert_eq!(
                    segment_size_in_header(short, codec).unwrap(),
                    size,
                    "{codec}"
                );
            }
        }
    }
}

#[test]
fn bad_heads_are_damage() {
    let short = segment_size_in_header(&[0xD1; 20], Codec::Plain).unwrap_err();
    assert!(short.reason.contains("too short"), "{}", short.reason);
    let mut no_long = long_header(1 << 20);
    no_long[2] = 0;
    let e = segment_size_in_header(&no_long, Codec::Plain).unwrap_err();
    assert!(e.reason.contains("no long page header"), "{}", e.reason);
    let odd = long_header(3 << 20);
    let e = segment_size_in_header(&odd, Codec::Plain).unwrap_err();
    assert!(e.reason.contains("3145728"), "{}", e.reason);
    for codec in Codec::COMPRESSED {
        let e = segment_size_in_header(
            b"definitely not compressed data of any kind, 40+ bytes long",
            codec,
        )
        .unwrap_err();
        assert!(
            e.reason.contains(&codec.to_string()),
            "{codec}: {}",
            e.reason
        );
    }
}

#[test]
fn every_codec_round_trips_a_segment_and_checks_its_size() {
    let seg = 1u32 << 20;
    let mut data = long_header(seg);
    data.resize(seg as usize, 0);
    for (i, b) in data.iter_mut().enumerate().skip(8192) {
        *b = (i / 97) as u8;
    }
    for codec in all_codecs() {
        let packed = bytes::Bytes::from(pack(codec, &data));
        assert_eq!(
            segment_bytes(packed.clone(), codec, None, seg).unwrap(),
            data,
            "{codec}"
        );
        let e = segment_bytes(packed.clone(), codec, None, seg / 2).unwrap_err();
        assert!(e.reason.contains("more than"), "{codec}: {}", e.reason);
        let truncated = packed.slice(..packed.len() / 2);
        assert!(
            segment_bytes(truncated, codec, None, seg).is_err(),
            "{codec}"
        );
    }
    let plain = bytes::Bytes::from(data[..1000].to_vec());
    let e = segment_bytes(plain, Codec::Plain, None, seg).unwrap_err();
    assert!(e.reason.contains("1000 bytes"), "{}", e.reason);
}

#[test]
fn checksums_are_verified_on_the_decompressed_content() {
    let seg = 1u32 << 20;
    let mut data = long_header(seg);
    data.resize(seg as usize, 3);
    let right: [u8; 20] = Sha1::digest(&data).into();
    let mut wrong = right;
    wrong[19] ^= 1;
    for codec in [Codec::Plain, Codec::Gzip, Codec::Lz4] {
        let packed = bytes::Bytes::from(pack(codec, &data));
        assert_eq!(
            segment_bytes(packed.clone(), codec, Some(&right), seg).unwrap(),
            data
        );
        let e = segment_bytes(packed, codec, Some(&wrong), seg).unwrap_err();
        assert!(
            e.reason.contains("SHA-1") && e.reason.contains(&hex(&wrong)),
            "{}",
            e.reason
        );
        assert!(e.reason.contains(&hex(&right)), "{}", e.reason);
    }
}

#[test]
fn names_split_off_their_codec() {
    let all = Codec::COMPRESSED;
    assert_eq!(Codec::split("a.lz4", &all), ("a", Codec::Lz4));
    assert_eq!(Codec::split("a.lzma", &all), ("a", Codec::Lzma));
    assert_eq!(Codec::split("a.br", &all), ("a", Codec::Brotli));
    assert_eq!(Codec::split("a.gz", &[Codec::Zstd]), ("a.gz", Codec::Plain));
    assert_eq!(Codec::split("a", &all), ("a", Codec::Plain));
}

#[test]
fn small_files_are_read_whole_within_a_limit() {
    let text = b"1\t0/3000000\tno recovery target specified\n";
    for codec in all_codecs() {
        let packed = pack(codec, text);
        assert_eq!(small_file(&packed, codec, 1024).unwrap(), text, "{codec}");
        let e = small_file(&packed, codec, 10).unwrap_err();
        assert!(e.reason.contains("larger than 10"), "{}", e.reason);
    }
}
