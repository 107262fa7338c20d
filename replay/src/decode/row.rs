//! From a WAL tuple to column values in text form.

use crate::change::Datum;
use crate::lsn::Lsn;
use crate::tuple::{decompress, deform, RawDatum, ToastChunks, Varlena};
use crate::types::{output_into, Dialect, TypeError, TypeInfo};
use crate::wal::TupleFragment;

use super::catalog::RelationSchema;
use super::error::{ReplayError, UnsupportedColumn};
use super::spill::ChangeWriter;

/// Scratch space for the text of values, and the dialect of the server
/// that wrote them.
#[derive(Debug, Default)]
pub(crate) struct ValueText {
    pub(crate) buf: String,
    pub(crate) dialect: Dialect,
}

/// Decodes `tuple` into one value per non-dropped column of `rel`, written
/// as a row to `out`; `text` is scratch space for the values' text.
///
/// External TOAST pointers are resolved from `toast` (the chunks the same
/// transaction wrote); a pointer with no chunks there is a value this change
/// did not write, reported as [`Datum::Unchanged`]. A value of a type the
/// decoder cannot print is reported to `unsupported`, which decides whether
/// to go on (and with what value) or stop.
pub(crate) fn decode_row(
    rel: &RelationSchema,
    tuple: &TupleFragment,
    toast: &ToastChunks,
    lsn: Lsn,
    unsupported: &mut dyn FnMut(UnsupportedColumn) -> Result<Datum, ReplayError>,
    out: &mut ChangeWriter<'_>,
    text: &mut ValueText,
) -> Result<(), ReplayError> {
    let tuple_error = |source| ReplayError::Tuple {
        relation: rel.qualified_name(),
        lsn,
        source,
    };
    let raw = deform(
        tuple.infomask2,
        tuple.infomask,
        tuple.hoff,
        &tuple.data,
        &rel.spec.attrs,
    )
    .map_err(|e| tuple_error(e.with_relfilenode(rel.spec.file.rel)))?;
    out.begin_row();
    let spec = &rel.spec;
    let columns = spec
        .attrs
        .attrs
        .iter()
        .zip(raw)
        .zip(&spec.types)
        .zip(&spec.type_names);
    for (((attr, raw), ty), type_name) in columns {
        if attr.dropped {
            continue;
        }
        let bytes = match raw {
            RawDatum::Null => {
                out.null();
                continue;
            }
            RawDatum::Missing => {
                match &attr.missing {
                    Some(missing) => out.text(missing),
                    None => out.null(),
                }
                continue;
            }
            RawDatum::CString(bytes) => {
                out.text(&String::from_utf8_lossy(bytes));
                continue;
            }
            RawDatum::Fixed(bytes) => std::borrow::Cow::Borrowed(bytes),
            RawDatum::Varlena(Varlena::Plain(bytes)) => std::borrow::Cow::Borrowed(bytes),
            RawDatum::Varlena(Varlena::Compressed {
                method,
                raw_size,
                data,
            }) => std::borrow::Cow::Owned(
                decompress(method, data, raw_size)
                    .map_err(|e| tuple_error(e.with_attnum(attr.attnum)))?,
            ),
            RawDatum::Varlena(Varlena::External(pointer)) => match toast.resolve(&pointer) {
                None => {
                    out.unchanged();
                    continue;
                }
                Some(resolved) => std::borrow::Cow::Owned(
                    resolved.map_err(|e| tuple_error(e.with_attnum(attr.attnum)))?,
                ),
            },
        };
        let Some(ty) = ty else {
            out.datum(&unsupported(UnsupportedColumn {
                relation: rel.qualified_name(),
                column: attr.name.clone(),
                type_name: type_name.to_string(),
            })?);
            continue;
        };
        text.buf.clear();
        match output_into(ty, &bytes, text.dialect, &mut text.buf) {
            Ok(()) => out.text(&text.buf),
            Err(TypeError::Unsupported { .. }) => out.datum(&unsupported(UnsupportedColumn {
                relation: rel.qualified_name(),
                column: attr.name.clone(),
                type_name: type_name.to_string(),
            })?),
            Err(source) => {
                return Err(ReplayError::Value {
                    relation: rel.qualified_name(),
                    column: attr.name.clone(),
                    type_name: type_name.to_string(),
                    lsn,
                    source,
                })
            }
        }
    }
    out.end_row();
    Ok(())
}

/// Whether a type is one the decoder prints (for planning: a column of any
/// other type cannot be replayed).
pub fn is_supported(ty: &TypeInfo) -> bool {
    ty.first_unsupported().is_none()
}
