//! The `tuple` target: a tuple fragment against a schema taken from the
//! input, with TOAST chunks logged before it.
//!
//! # Input layout
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | number of TOAST chunk rows that follow (modulo 16) |
//! | ...   | each chunk row: length (u16 LE), then that many bytes of [`encode_fragment`] form |
//! | 1     | number of attributes of the schema (modulo 32) |
//! | ...   | one descriptor byte per attribute (see [`attr`]) |
//! | ...   | the tuple: `t_infomask2` (u16 LE), `t_infomask` (u16 LE), `t_hoff`, fragment |
//!
//! # What is driven
//!
//! Chunk rows go through `decode_chunk` into a `ToastChunks`. The tuple is
//! deformed; every stored value is then made plain the way the replay
//! pipeline does (`decompress` / `detoast_inline` for inline values, the
//! chunks for external ones) and printed with `types::output` as the
//! attribute's type. An external pointer naming no logged value is also
//! tried against the values that were logged, so the fuzzer reaches
//! reassembly and decompression without guessing value ids.
//!
//! # What is checked
//!
//! `deform` returns one datum per attribute, fixed-width values have their
//! width, `decompress` output has the declared size, and `bytes_held`
//! follows the chunks added and taken.

use walfill_replay::tuple::{
    decode_chunk, decompress, deform, detoast_inline, Align, AttrSchema, RawDatum, RelSchema,
    Storage, ToastChunks, ToastPointer, Varlena,
};
use walfill_replay::types::{BaseType, TypeInfo};
use walfill_replay::wal::TupleFragment;

use crate::bytes::Input;
use crate::datum::{print, types as type_table};

/// Lengths of the untyped attribute layouts (descriptors past the type table).
const RAW_LENS: [i16; 5] = [-2, 3, 5, -1, 7];
const ALIGNS: [Align; 4] = [Align::Char, Align::Short, Align::Int, Align::Double];

/// Descriptor bit: the attribute is dropped.
pub const DROPPED: u8 = 0x80;

/// An attribute of a fuzz schema, with the type to print its values as.
#[derive(Clone, Debug)]
pub struct FuzzAttr {
    /// The attribute as `deform` sees it.
    pub schema: AttrSchema,
    /// The type its values are printed as (`None`: not printed).
    pub ty: Option<&'static TypeInfo>,
}

/// The attribute a descriptor byte stands for, as attribute `attnum`.
///
/// Bit 7 marks it dropped. The low 7 bits index the type table of
/// [`crate::datum::types`] (the attribute then has that type's length and
/// alignment); indexes past the table give untyped layouts mixing odd fixed
/// lengths, C strings and varlenas with every alignment.
pub fn attr(desc: u8, attnum: i16) -> FuzzAttr {
    let table = type_table();
    let idx = usize::from(desc & 0x7F);
    let dropped = desc & DROPPED != 0;
    let (len, align, ty) = match table.get(idx) {
        Some(ty) => (ty.len, ty.align, Some(ty)),
        None => {
            let k = idx - table.len();
            (RAW_LENS[(k / 4) % RAW_LENS.len()], ALIGNS[k % 4], None)
        }
    };
    FuzzAttr {
        schema: AttrSchema {
            name: format!("a{attnum}"),
            attnum,
            type_oid: if dropped { 0 } else { ty.map_or(0, |t| t.oid) },
            typmod: -1,
            len,
            byval: len > 0 && len <= 8,
            align,
            storage: if len == -1 {
                Storage::Extended
            } else {
                Storage::Plain
            },
            dropped,
            missing: None,
            generated: false,
        },
        ty: if dropped { None } else { ty },
    }
}

/// The descriptor byte of the attribute typed as `base`.
pub fn base_desc(base: BaseType) -> u8 {
    crate::datum::selector(crate::datum::TypeSel::Base(base))
}

/// A tuple header and fragment in input form: infomask2, infomask, hoff, data.
pub fn encode_fragment(f: &TupleFragment) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + f.data.len());
    out.extend_from_slice(&f.infomask2.to_le_bytes());
    out.extend_from_slice(&f.infomask.to_le_bytes());
    out.push(f.hoff);
    out.extend_from_slice(&f.data);
    out
}

/// Builds a `tuple` input from chunk rows, schema descriptors and the tuple.
pub fn encode(chunks: &[TupleFragment], descs: &[u8], tuple: &TupleFragment) -> Vec<u8> {
    let chunks = &chunks[..chunks.len().min(15)];
    let mut out = vec![chunks.len() as u8];
    for c in chunks {
        let bytes = encode_fragment(c);
        out.extend_from_slice(&(bytes.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
        out.extend_from_slice(&bytes[..bytes.len().min(usize::from(u16::MAX))]);
    }
    let descs = &descs[..descs.len().min(31)];
    out.push(descs.len() as u8);
    out.extend_from_slice(descs);
    out.extend_from_slice(&encode_fragment(tuple));
    out
}

fn read_fragment(input: &mut Input<'_>) -> (u16, u16, u8) {
    (input.u16(), input.u16(), input.u8())
}

/// Runs the `tuple` harness on one input.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut toast = Toast::default();
    for _ in 0..input.u8() % 16 {
        let len = usize::from(input.u16());
        let mut row = Input::new(input.take(len));
        let (infomask2, infomask, hoff) = read_fragment(&mut row);
        toast.add(infomask2, infomask, hoff, row.rest());
    }
    let natts = input.u8() % 32;
    let attrs: Vec<FuzzAttr> = (1..=i16::from(natts))
        .map(|n| attr(input.u8(), n))
        .collect();
    let (infomask2, infomask, hoff) = read_fragment(&mut input);
    let fragment = input.rest();
    let schema = RelSchema {
        attrs: attrs.iter().map(|a| a.schema.clone()).collect(),
    };
    let datums = match deform(infomask2, infomask, hoff, fragment, &schema) {
        Ok(d) => d,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert_eq!(
        datums.len(),
        attrs.len(),
        "deform returned the wrong number of datums"
    );
    for (datum, a) in datums.iter().zip(&attrs) {
        if let RawDatum::Fixed(b) = datum {
            assert_eq!(
                b.len(),
                a.schema.len as usize,
                "fixed-width value of the wrong width"
            );
        }
        exercise_datum(datum, a.ty, &mut toast);
    }
    toast.take_all();
}

/// Makes a deformed value plain and prints it as `ty`.
fn exercise_datum(datum: &RawDatum<'_>, ty: Option<&TypeInfo>, toast: &mut Toast) {
    let plain: Option<Vec<u8>> = match datum {
        RawDatum::Null | RawDatum::Missing => None,
        RawDatum::Fixed(b) => Some(b.to_vec()),
        RawDatum::CString(s) => {
            print(&TypeInfo::base(BaseType::Text), s);
            None
        }
        RawDatum::Varlena(v) => {
            if let Varlena::Compressed {
                method,
                raw_size,
                data,
            } = v
            {
                if let Ok(out) = decompress(*method, data, *raw_size) {
                    assert_eq!(
                        out.len(),
                        *raw_size as usize,
                        "decompress gave the wrong size"
                    );
                }
            }
            match v {
                Varlena::External(p) => toast.resolve(p),
                _ => match detoast_inline(v) {
                    Ok(b) => Some(b.into_owned()),
                    Err(e) => {
                        let _ = e.to_string();
                        None
                    }
                },
            }
        }
    };
    if let (Some(bytes), Some(ty)) = (plain, ty) {
        print(ty, &bytes);
    }
}

/// Decodes a tuple logged in WAL (by the stream and record targets) against
/// a few plausible schemas, and as a TOAST chunk.
pub fn exercise_fragment(f: &TupleFragment) {
    if let Ok(chunk) = decode_chunk(f.infomask2, f.infomask, f.hoff, &f.data) {
        let mut chunks = ToastChunks::new();
        let _ = chunks.add_chunk(chunk.chunk_id, chunk.chunk_seq, chunk.data);
    }
    let int4 = base_desc(BaseType::Int4);
    let text = base_desc(BaseType::Text);
    for descs in [[int4, text, int4], [int4, text, text]] {
        let attrs: Vec<FuzzAttr> = descs.iter().zip(1..).map(|(&d, n)| attr(d, n)).collect();
        let schema = RelSchema {
            attrs: attrs.iter().map(|a| a.schema.clone()).collect(),
        };
        if let Ok(datums) = deform(f.infomask2, f.infomask, f.hoff, &f.data, &schema) {
            let mut toast = Toast::default();
            for (datum, a) in datums.iter().zip(&attrs) {
                exercise_datum(datum, a.ty, &mut toast);
            }
        }
    }
}

/// The chunks logged so far, with the harness's own account of them.
#[derive(Default)]
struct Toast {
    chunks: ToastChunks,
    /// Value ids in order of first chunk, with their bytes so far.
    values: Vec<(u32, Vec<u8>)>,
    held: usize,
}

impl Toast {
    fn add(&mut self, infomask2: u16, infomask: u16, hoff: u8, fragment: &[u8]) {
        let chunk = match decode_chunk(infomask2, infomask, hoff, fragment) {
            Ok(c) => c,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        };
        if self
            .chunks
            .add_chunk(chunk.chunk_id, chunk.chunk_seq, chunk.data)
            .is_ok()
        {
            self.held += chunk.data.len();
            match self.values.iter_mut().find(|(id, _)| *id == chunk.chunk_id) {
                Some((_, bytes)) => bytes.extend_from_slice(chunk.data),
                None => self.values.push((chunk.chunk_id, chunk.data.to_vec())),
            }
        }
        assert_eq!(
            self.chunks.bytes_held(),
            self.held,
            "bytes_held does not follow add_chunk"
        );
        assert_eq!(
            self.chunks.is_empty(),
            self.values.is_empty(),
            "is_empty is wrong"
        );
    }

    /// The payload `p` refers to: as given, or else as pointers to each
    /// logged value made consistent with its bytes (plain and compressed).
    fn resolve(&self, p: &ToastPointer) -> Option<Vec<u8>> {
        let mut candidates = vec![*p];
        if !self.values.iter().any(|(id, _)| *id == p.value_id) {
            for (id, bytes) in self.values.iter().take(2) {
                let ext_size = bytes.len() as u32 & 0x3FFF_FFFF;
                let plain = ToastPointer {
                    value_id: *id,
                    ext_size,
                    raw_size: ext_size.wrapping_add(4) as i32,
                    compression: None,
                    ..*p
                };
                let tcinfo = bytes
                    .get(..4)
                    .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                let compressed = ToastPointer {
                    raw_size: (tcinfo & 0x3FFF_FFFF).wrapping_add(4) as i32,
                    ..plain
                };
                candidates.push(plain);
                candidates.push(compressed);
            }
        }
        let mut found = None;
        for c in &candidates {
            match self.chunks.resolve(c) {
                Some(Ok(payload)) => found = found.or(Some(payload)),
                Some(Err(e)) => {
                    let _ = e.to_string();
                }
                None => {}
            }
        }
        found
    }

    /// Takes every logged value out (as a pointer made consistent with it)
    /// and checks the account.
    fn take_all(&mut self) {
        for (id, bytes) in std::mem::take(&mut self.values) {
            let ext_size = bytes.len() as u32 & 0x3FFF_FFFF;
            let pointer = ToastPointer {
                raw_size: ext_size.wrapping_add(4) as i32,
                ext_size,
                compression: None,
                value_id: id,
                toast_relid: 0,
            };
            let taken = self.chunks.take(&pointer);
            assert!(taken.is_some(), "take lost value {id}");
            if let Some(Ok(payload)) = taken {
                assert_eq!(payload, bytes, "take changed an uncompressed value");
            }
            self.held -= bytes.len();
            assert_eq!(
                self.chunks.bytes_held(),
                self.held,
                "bytes_held does not follow take"
            );
        }
        assert!(self.chunks.is_empty(), "values left after taking all");
        self.chunks.clear();
    }
}
