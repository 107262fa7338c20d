//! A private database per test, and the comparison of decoded tuples with
//! what `pageinspect` reports.

use std::time::{SystemTime, UNIX_EPOCH};

use postgres::{Client, NoTls};
use walfill_replay::tuple::{
    decode_chunk, decompress, deform, detoast_inline, Align, AttrSchema, Compression, RawDatum,
    RelSchema, Storage, ToastChunks, Varlena,
};

/// A database created for one test and dropped when it ends.
pub(crate) struct TestDb {
    admin: postgres::Config,
    name: String,
    client: Client,
    server_version: i32,
}

impl TestDb {
    /// Creates a uniquely named database with `pageinspect` installed.
    pub(crate) fn create() -> TestDb {
        let url = std::env::var("WALFILL_TEST_PG_URL").unwrap_or_else(|_| {
            panic!(
                "WALFILL_TEST_PG_URL is not set: this test needs the URL of a PostgreSQL 15+ \
                 superuser connection with pageinspect available, \
                 e.g. postgresql://user:password@127.0.0.1:5432/postgres"
            )
        });
        let admin: postgres::Config = url
            .parse()
            .unwrap_or_else(|e| panic!("WALFILL_TEST_PG_URL is not a valid URL: {e}"));
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let name = format!("walfill_tuple_{}_{nanos}", std::process::id());
        let mut a = admin
            .connect(NoTls)
            .expect("connect to WALFILL_TEST_PG_URL");
        a.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let mut cfg = admin.clone();
        cfg.dbname(&name);
        let mut client = cfg.connect(NoTls).unwrap();
        client
            .batch_execute("CREATE EXTENSION pageinspect; SET extra_float_digits = 3")
            .unwrap();
        let v: String = client
            .query_one("SHOW server_version_num", &[])
            .unwrap()
            .get(0);
        let server_version = v.parse().unwrap();
        assert!(
            server_version >= 150_000,
            "PostgreSQL 15+ needed, server is {v}"
        );
        TestDb {
            admin,
            name,
            client,
            server_version,
        }
    }

    /// Runs SQL statements, panicking on failure.
    pub(crate) fn execute(&mut self, sql: &str) {
        self.client
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// `lz4`, or `pglz` on a server built without lz4 (npm's 16-18).
    pub(crate) fn lz4_or_pglz(&mut self) -> &'static str {
        let row = self
            .client
            .query_one(
                "SELECT 'lz4' = ANY (enumvals) FROM pg_settings
                  WHERE name = 'default_toast_compression'",
                &[],
            )
            .expect("reading the compression methods");
        if row.get::<_, bool>(0) {
            "lz4"
        } else {
            "pglz"
        }
    }

    /// The connection to the test database.
    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut a) = self.admin.connect(NoTls) {
            let _ = a.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// How many values of each kind the comparisons saw, so a test can insist
/// that its data exercised every path.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    fixed: usize,
    null: usize,
    short_header: usize,
    long_header: usize,
    /// 4-byte headers whose first byte is 0, like padding.
    long_header_zero_byte: usize,
    inline_pglz: usize,
    pub inline_lz4: usize,
    external_plain: usize,
    external_pglz: usize,
    pub external_lz4: usize,
    missing_default: usize,
    missing_null: usize,
    dropped_with_bytes: usize,
}

impl Coverage {
    /// Panics unless every kind was seen at least once (the lz4 kinds only
    /// when the server has lz4: `lz4` is the method used).
    pub(crate) fn require_all(&self, lz4: &str) {
        let s = format!("{self:?}");
        let unseen: Vec<&str> = s
            .trim_start_matches("Coverage { ")
            .trim_end_matches(" }")
            .split(", ")
            .filter(|kind| kind.ends_with(": 0"))
            .filter(|kind| lz4 == "lz4" || !kind.contains("lz4"))
            .collect();
        assert!(
            unseen.is_empty(),
            "some kinds of values were never checked: {unseen:?} in {s}"
        );
    }
}

/// The relation's attributes from `pg_attribute`, with missing values in
/// text form.
fn load_schema(c: &mut Client, table: &str) -> RelSchema {
    let rows = c
        .query(
            "SELECT attname::text, attnum, atttypid, atttypmod, attlen, attbyval,
                    attalign::text, attstorage::text, attisdropped, atthasmissing,
                    format_type(atttypid, atttypmod)
               FROM pg_attribute WHERE attrelid = $1::text::regclass AND attnum > 0
              ORDER BY attnum",
            &[&table],
        )
        .unwrap();
    let mut attrs = Vec::new();
    for r in rows {
        let attnum: i16 = r.get(1);
        let missing = if r.get::<_, bool>(9) {
            let ty: String = r.get(10);
            let sql = format!(
                "SELECT ((attmissingval::text)::{ty}[])[1]::text FROM pg_attribute
                  WHERE attrelid = $1::text::regclass AND attnum = $2"
            );
            c.query_one(&sql, &[&table, &attnum]).unwrap().get(0)
        } else {
            None
        };
        let align: String = r.get(6);
        let storage: String = r.get(7);
        attrs.push(AttrSchema {
            name: r.get(0),
            attnum,
            type_oid: r.get(2),
            typmod: r.get(3),
            len: r.get(4),
            byval: r.get(5),
            align: Align::from_code(align.as_bytes()[0]).unwrap(),
            storage: Storage::from_code(storage.as_bytes()[0]).unwrap(),
            dropped: r.get(8),
            missing,
            generated: false,
        });
    }
    RelSchema { attrs }
}

/// Number of pages of a relation.
fn block_count(c: &mut Client, rel: &str) -> i64 {
    c.query_one(
        "SELECT pg_relation_size($1::text::regclass) / current_setting('block_size')::int8",
        &[&rel],
    )
    .unwrap()
    .get(0)
}

/// A tuple as `heap_page_items` shows it, rebuilt into the WAL fragment form.
struct PageTuple {
    lp: i32,
    block: i64,
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    fragment: Vec<u8>,
    attrs: Vec<Option<Vec<u8>>>,
    detoasted: Vec<Option<Vec<u8>>>,
}

fn page_tuples(c: &mut Client, rel: &str, with_attrs: bool) -> Vec<PageTuple> {
    let mut out = Vec::new();
    for block in 0..block_count(c, rel) {
        let sql = if with_attrs {
            "SELECT h.lp::int, h.t_infomask2, h.t_infomask, h.t_hoff::int, h.t_bits, h.t_data,
                    a.t_attrs, d.t_attrs
               FROM heap_page_items(get_raw_page($1::text, $2)) h
               JOIN heap_page_item_attrs(get_raw_page($1::text, $2), $1::text::regclass, false) a
                    USING (lp)
               JOIN heap_page_item_attrs(get_raw_page($1::text, $2), $1::text::regclass, true) d
                    USING (lp)
              WHERE h.lp_flags = 1 ORDER BY h.lp"
        } else {
            "SELECT h.lp::int, h.t_infomask2, h.t_infomask, h.t_hoff::int, h.t_bits, h.t_data,
                    NULL::bytea[], NULL::bytea[]
               FROM heap_page_items(get_raw_page($1::text, $2)) h
              WHERE h.lp_flags = 1 ORDER BY h.lp"
        };
        for r in c.query(sql, &[&rel, &block]).unwrap() {
            let hoff = r.get::<_, i32>(3) as u8;
            let mut fragment = Vec::new();
            if let Some(bits) = r.get::<_, Option<String>>(4) {
                for byte in bits.as_bytes().chunks(8) {
                    let mut b = 0u8;
                    for (i, &ch) in byte.iter().enumerate() {
                        b |= u8::from(ch == b'1') << i;
                    }
                    fragment.push(b);
                }
            }
            assert!(
                fragment.len() <= usize::from(hoff) - 23,
                "bitmap longer than t_hoff allows"
            );
            fragment.resize(usize::from(hoff) - 23, 0);
            fragment.extend(r.get::<_, Vec<u8>>(5));
            out.push(PageTuple {
                lp: r.get(0),
                block,
                infomask2: r.get::<_, i32>(1) as u16,
                infomask: r.get::<_, i32>(2) as u16,
                hoff,
                fragment,
                attrs: r.get::<_, Option<_>>(6).unwrap_or_default(),
                detoasted: r.get::<_, Option<_>>(7).unwrap_or_default(),
            });
        }
    }
    out
}

/// The chunks of the table's toast relation, read from its raw pages with
/// `decode_chunk`, checked against the rows SQL returns, and collected in
/// chunk order.
fn toast_chunks(c: &mut Client, table: &str) -> ToastChunks {
    let mut chunks = ToastChunks::new();
    let toast: Option<String> = c
        .query_one(
            "SELECT NULLIF(reltoastrelid, 0)::regclass::text FROM pg_class
              WHERE oid = $1::text::regclass",
            &[&table],
        )
        .unwrap()
        .get(0);
    let Some(toast) = toast else { return chunks };
    let mut decoded = Vec::new();
    for t in page_tuples(c, &toast, false) {
        let ch = decode_chunk(t.infomask2, t.infomask, t.hoff, &t.fragment)
            .unwrap_or_else(|e| panic!("{toast} ({},{}): {e}", t.block, t.lp));
        decoded.push((ch.chunk_id, ch.chunk_seq, ch.data.to_vec()));
    }
    let sql =
        format!("SELECT chunk_id, chunk_seq, chunk_data FROM {toast} ORDER BY chunk_id, chunk_seq");
    let rows: Vec<(u32, i32, Vec<u8>)> = c
        .query(&sql, &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    // Pages hold chunks where free space was found; WAL has them in order.
    decoded.sort();
    assert_eq!(
        decoded, rows,
        "chunks decoded from {toast} pages differ from its rows"
    );
    for (id, seq, data) in &decoded {
        chunks.add_chunk(*id, *seq, data).unwrap();
    }
    chunks
}

/// Deforms every tuple of `table` and compares it with the server's view.
pub(crate) fn check_table(db: &mut TestDb, table: &str, cov: &mut Coverage) {
    let pg17 = db.server_version >= 170_000;
    let c = &mut db.client;
    let schema = load_schema(c, table);
    let chunks = toast_chunks(c, table);
    for t in page_tuples(c, table, true) {
        let at = format!("{table} ({},{})", t.block, t.lp);
        let ctid = format!("({},{})", t.block, t.lp);
        let datums = deform(t.infomask2, t.infomask, t.hoff, &t.fragment, &schema)
            .unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(datums.len(), schema.attrs.len());
        let natts = usize::from(t.infomask2 & 0x07ff);
        for (i, (attr, datum)) in schema.attrs.iter().zip(&datums).enumerate() {
            let at = format!("{at} attnum {}", attr.attnum);
            let raw = t.attrs.get(i).cloned().flatten();
            let full = t.detoasted.get(i).cloned().flatten();
            match (datum, &raw) {
                (RawDatum::Missing, None) => {
                    assert!(i >= natts, "{at}: missing inside the tuple");
                    let sql = format!(
                        "SELECT {}::text FROM {table} WHERE ctid = $1::text::tid",
                        attr.name
                    );
                    let value: Option<String> = c.query_one(&sql, &[&ctid]).unwrap().get(0);
                    assert_eq!(value, attr.missing, "{at}: missing value");
                    if value.is_some() {
                        cov.missing_default += 1
                    } else {
                        cov.missing_null += 1
                    }
                }
                (RawDatum::Null, None) => cov.null += 1,
                (RawDatum::Fixed(b), Some(r)) => {
                    assert_eq!(b, r, "{at}");
                    cov.fixed += 1;
                    cov.dropped_with_bytes += usize::from(attr.dropped);
                }
                (RawDatum::Varlena(v), Some(r)) => {
                    cov.dropped_with_bytes += usize::from(attr.dropped);
                    let full = full.unwrap_or_else(|| panic!("{at}: no detoasted value"));
                    check_varlena(c, table, &ctid, attr, v, r, &full, &chunks, pg17, cov, &at);
                }
                _ => panic!("{at}: decoded {datum:?}, pageinspect has {raw:?}"),
            }
        }
    }
}

/// Compares one varlena with its raw bytes `r` and its detoasted payload.
#[allow(clippy::too_many_arguments)]
fn check_varlena(
    c: &mut Client,
    table: &str,
    ctid: &str,
    attr: &AttrSchema,
    v: &Varlena<'_>,
    r: &[u8],
    payload: &[u8],
    chunks: &ToastChunks,
    pg17: bool,
    cov: &mut Coverage,
    at: &str,
) {
    match *v {
        Varlena::Plain(p) => {
            let header = if r[0] & 1 == 1 { 1 } else { 4 };
            if header == 1 {
                cov.short_header += 1
            } else {
                cov.long_header += 1
            }
            cov.long_header_zero_byte += usize::from(r[0] == 0);
            assert_eq!(p, &r[header..], "{at}: payload");
            assert_eq!(p, payload, "{at}: detoasted payload");
            assert_eq!(detoast_inline(v).unwrap().as_ref(), payload);
        }
        Varlena::Compressed {
            method,
            raw_size,
            data,
        } => {
            assert_eq!(r[0] & 3, 2, "{at}: not a compressed header");
            assert_eq!(data, &r[8..], "{at}: compressed bytes");
            assert_eq!(raw_size as usize, payload.len(), "{at}: raw size");
            let out = decompress(method, data, raw_size).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert!(out == payload, "{at}: decompressed value differs");
            assert_eq!(detoast_inline(v).unwrap().as_ref(), payload);
            let (m, _, _) = column_facts(c, table, ctid, attr, false);
            assert_eq!(Some(method), m, "{at}: method");
            if method == Compression::Pglz {
                cov.inline_pglz += 1
            } else {
                cov.inline_lz4 += 1
            }
        }
        Varlena::External(p) => {
            assert_eq!(r.len(), 18, "{at}: TOAST pointer size");
            assert_eq!(p.raw_size as usize, payload.len() + 4, "{at}: raw size");
            let (m, size, chunk_id) = column_facts(c, table, ctid, attr, pg17);
            assert_eq!(p.compression, m, "{at}: method");
            assert_eq!(i64::from(p.ext_size), size, "{at}: stored size");
            if let Some(id) = chunk_id {
                assert_eq!(p.value_id, id, "{at}: chunk id");
            }
            let got = chunks
                .resolve(&p)
                .unwrap_or_else(|| panic!("{at}: no chunks for value {}", p.value_id))
                .unwrap_or_else(|e| panic!("{at}: {e}"));
            assert!(got == payload, "{at}: reassembled value differs");
            match p.compression {
                None => cov.external_plain += 1,
                Some(Compression::Pglz) => cov.external_pglz += 1,
                Some(Compression::Lz4) => cov.external_lz4 += 1,
            }
        }
    }
    // For text and bytea, also compare with the value read through SQL.
    let expr = match attr.type_oid {
        25 | 1043 => format!("convert_to({}::text, 'UTF8')", attr.name),
        17 => attr.name.clone(),
        _ => return,
    };
    let sql = format!("SELECT {expr} FROM {table} WHERE ctid = $1::text::tid");
    let value: Vec<u8> = c.query_one(&sql, &[&ctid]).unwrap().get(0);
    assert!(value == payload, "{at}: value read through SQL differs");
}

/// `pg_column_compression`, `pg_column_size` and (PG 17+)
/// `pg_column_toast_chunk_id` of one stored value.
fn column_facts(
    c: &mut Client,
    table: &str,
    ctid: &str,
    attr: &AttrSchema,
    chunk_id: bool,
) -> (Option<Compression>, i64, Option<u32>) {
    let col = &attr.name;
    let id = if chunk_id {
        format!("pg_column_toast_chunk_id({col})")
    } else {
        "NULL::oid".into()
    };
    let sql = format!(
        "SELECT pg_column_compression({col}), pg_column_size({col})::int8, {id}
           FROM {table} WHERE ctid = $1::text::tid"
    );
    let r = c.query_one(&sql, &[&ctid]).unwrap();
    let method = match r.get::<_, Option<String>>(0).as_deref() {
        None => None,
        Some("pglz") => Some(Compression::Pglz),
        Some("lz4") => Some(Compression::Lz4),
        Some(other) => panic!("unknown compression {other}"),
    };
    (method, r.get(1), r.get(2))
}
