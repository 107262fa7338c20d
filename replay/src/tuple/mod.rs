//! Heap tuples, varlena values and TOAST.
//!
//! A row change in WAL carries the row as a *tuple fragment* (the on-disk
//! tuple minus its first 23 header bytes). Turning it into column values
//! takes three steps, each in its own module:
//!
//! 1. [`deform`] splits the fragment into one [`RawDatum`] per attribute of
//!    the relation's [`RelSchema`]: NULL, missing (column added later),
//!    fixed-width bytes, or a [`Varlena`];
//! 2. a varlena is plain, inline-compressed (pglz or lz4, undone by
//!    [`decompress`] / [`detoast_inline`]), or an external [`ToastPointer`];
//! 3. external values are rebuilt from the toast-table chunks the same
//!    transaction logged just before ([`decode_chunk`], [`ToastChunks`]).
//!
//! Turning the resulting bytes into text is the job of [`crate::types`].
//! Nothing here panics on malformed input: every failure is a
//! [`TupleError`] naming the attribute and offset.

mod compress;
mod error;
mod heap_tuple;
mod pglz;
mod schema;
mod toast;
mod varlena;

pub use compress::{decompress, Compression};
pub use error::{TupleError, TupleErrorKind};
pub use heap_tuple::{deform, RawDatum, HEAP_HASNULL, HEAP_NATTS_MASK, SIZEOF_HEAP_TUPLE_HEADER};
pub(crate) use heap_tuple::{deform_layouts, Layout};
pub use schema::{Align, AttrSchema, RelSchema, Storage};
pub use toast::{decode_chunk, ToastChunk, ToastChunks};
pub use varlena::{detoast_inline, ToastPointer, Varlena};
