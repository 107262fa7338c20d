//! Types as the catalog describes them, turned into what the datum printer
//! needs ([`TypeInfo`]): built-in types, enums with their labels, domains
//! over their base type, ranges over their subtype, multiranges over their
//! range type, composites over their attributes' types, user-defined base
//! types whose output function is a built-in one walfill prints, arrays of
//! any of these; anything else unsupported.

use std::collections::HashMap;

use crate::types::{Align, BaseType, Field, TypeInfo};

/// One row of `pg_type` (with its enum labels), as far as decoding cares.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TypeRow {
    /// Type OID.
    pub oid: u32,
    /// `format_type(oid, NULL)`.
    pub name: String,
    /// `typtype`: `b`ase, `e`num, `d`omain, `c`omposite, `r`ange, `m`ultirange, `p`seudo.
    #[serde(rename = "type")]
    pub kind: String,
    /// `typlen`.
    pub len: i16,
    /// `typbyval`.
    pub byval: bool,
    /// `typalign`: `c`, `s`, `i` or `d`.
    pub align: String,
    /// `typelem`: element type of an array type.
    pub elem: u32,
    /// `typbasetype`: base type of a domain.
    pub base: u32,
    /// `typdelim`: the array delimiter of this (element) type.
    pub delim: String,
    /// Whether it is a true array type (`typsubscript` is the array handler).
    pub is_array: bool,
    /// Enum labels: `(pg_enum oid, label)`.
    #[serde(default)]
    pub labels: Vec<(u32, String)>,
    /// A range type's subtype (`pg_range.rngsubtype`); journals written
    /// before walfill printed ranges lack it.
    #[serde(default)]
    pub subtype: Option<u32>,
    /// A multirange type's range type (`pg_range.rngtypid`).
    #[serde(default)]
    pub range: Option<u32>,
    /// A composite type's attributes in attnum order, dropped ones
    /// included; journals written before walfill printed composites lack
    /// them.
    #[serde(default)]
    pub attrs: Option<Vec<TypeAttr>>,
    /// A user-defined base type's output function, when it is one built
    /// into the server (`prosrc` of a `LANGUAGE internal` function, like
    /// `int4out`): values print as that function prints them.
    #[serde(default)]
    pub output: Option<String>,
}

/// One attribute of a composite type (a row of `pg_attribute`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TypeAttr {
    /// `atttypid` (0 when dropped).
    pub typid: u32,
    /// `attlen`.
    pub len: i16,
    /// `attbyval`.
    pub byval: bool,
    /// `attalign`.
    pub align: String,
    /// `attisdropped`.
    pub dropped: bool,
}

/// Type rows by OID.
#[derive(Clone, Debug, Default)]
pub struct TypeRows {
    rows: HashMap<u32, TypeRow>,
}

fn first_byte(text: &str, default: u8) -> u8 {
    text.bytes().next().unwrap_or(default)
}

impl TypeRows {
    /// Collects rows.
    pub fn new(rows: impl IntoIterator<Item = TypeRow>) -> TypeRows {
        TypeRows {
            rows: rows.into_iter().map(|r| (r.oid, r)).collect(),
        }
    }

    /// What the datum printer needs to print values of type `oid`.
    pub fn info(&self, oid: u32) -> TypeInfo {
        self.info_depth(oid, 0)
    }

    fn info_depth(&self, oid: u32, depth: u32) -> TypeInfo {
        if let Some(info) = TypeInfo::builtin(oid) {
            return info;
        }
        let Some(row) = self.rows.get(&oid).filter(|_| depth < 16) else {
            return TypeInfo::unsupported(oid, -1, false, Align::Int, None);
        };
        let align = Align::from_code(first_byte(&row.align, b'i')).unwrap_or(Align::Int);
        let with_layout = |info: TypeInfo| TypeInfo {
            len: row.len,
            byval: row.byval,
            align,
            ..info
        };
        let unsupported =
            || TypeInfo::unsupported(oid, row.len, row.byval, align, Some(row.name.clone()));
        match first_byte(&row.kind, b'b') {
            b'e' => TypeInfo::enum_type(oid, row.labels.iter().cloned().collect()),
            b'd' => TypeInfo::domain(oid, self.info_depth(row.base, depth + 1)),
            b'r' => match row.subtype {
                Some(sub) => with_layout(TypeInfo::range_of(oid, self.info_depth(sub, depth + 1))),
                None => unsupported(),
            },
            b'm' => match row.range {
                Some(range) => with_layout(TypeInfo::multirange_of(
                    oid,
                    self.info_depth(range, depth + 1),
                )),
                None => unsupported(),
            },
            b'c' => match &row.attrs {
                Some(attrs) => with_layout(TypeInfo::composite(
                    oid,
                    attrs
                        .iter()
                        .map(|a| {
                            if a.dropped {
                                let align = Align::from_code(first_byte(&a.align, b'i'))
                                    .unwrap_or(Align::Int);
                                Field::dropped(a.len, a.byval, align)
                            } else {
                                Field::of(self.info_depth(a.typid, depth + 1))
                            }
                        })
                        .collect(),
                )),
                None => unsupported(),
            },
            _ if row.is_array && row.elem != 0 => {
                let delimiter = self
                    .rows
                    .get(&row.elem)
                    .map_or(b',', |e| first_byte(&e.delim, b','));
                TypeInfo::array_of(oid, self.info_depth(row.elem, depth + 1), delimiter)
            }
            b'b' => match row
                .output
                .as_deref()
                .and_then(BaseType::from_output_function)
            {
                Some(base) => with_layout(TypeInfo {
                    oid,
                    ..TypeInfo::base(base)
                }),
                None => unsupported(),
            },
            _ => unsupported(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TypeKind;

    fn row(oid: u32, kind: &str, elem: u32, base: u32, is_array: bool) -> TypeRow {
        TypeRow {
            oid,
            name: format!("t{oid}"),
            kind: kind.into(),
            len: if is_array { -1 } else { 4 },
            byval: !is_array,
            align: "i".into(),
            elem,
            base,
            delim: ",".into(),
            is_array,
            labels: if kind == "e" {
                vec![(900, "sad".into())]
            } else {
                vec![]
            },
            subtype: None,
            range: None,
            attrs: None,
            output: None,
        }
    }

    #[test]
    fn user_types_resolve_through_arrays_and_domains() {
        let rows = TypeRows::new([
            row(50000, "e", 0, 0, false),
            row(50001, "b", 50000, 0, true),
            row(50002, "d", 0, 23, false),
            row(50003, "b", 0, 0, false),
        ]);
        assert!(matches!(rows.info(50000).kind, TypeKind::Enum { .. }));
        match rows.info(50001).kind {
            TypeKind::Array { element, .. } => {
                assert!(matches!(element.kind, TypeKind::Enum { .. }))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(rows.info(50002).kind, TypeKind::Domain { .. }));
        assert!(matches!(
            rows.info(50003).kind,
            TypeKind::Unsupported { .. }
        ));
        assert!(matches!(
            rows.info(77777).kind,
            TypeKind::Unsupported { .. }
        ));
        assert_eq!(rows.info(23), TypeInfo::builtin(23).unwrap());
    }

    #[test]
    fn pg_lsn_and_its_array_are_builtin_and_supported() {
        use crate::types::BaseType;
        let rows = TypeRows::default();
        let lsn = rows.info(3220);
        assert_eq!(lsn.kind, TypeKind::Base(BaseType::PgLsn));
        assert_eq!((lsn.len, lsn.byval, lsn.align), (8, true, Align::Double));
        assert!(crate::decode::is_supported(&lsn));
        let array = rows.info(3221);
        assert!(matches!(array.kind, TypeKind::Array { .. }));
        assert_eq!(array.align, Align::Double);
        assert!(crate::decode::is_supported(&array));
    }

    #[test]
    fn vectors_are_builtin_types_not_arrays() {
        use crate::types::BaseType;
        // pg_type gives int2vector and oidvector an element type and the
        // array subscript handler, but they print as space-separated lists.
        let rows = TypeRows::new([row(22, "b", 21, 0, true), row(30, "b", 26, 0, true)]);
        assert_eq!(rows.info(22).kind, TypeKind::Base(BaseType::Int2vector));
        assert_eq!(rows.info(30).kind, TypeKind::Base(BaseType::Oidvector));
        assert!(matches!(rows.info(1013).kind, TypeKind::Array { .. }));
    }

    #[test]
    fn ranges_and_multiranges_resolve_through_their_subtype() {
        let range = TypeRow {
            subtype: Some(25),
            ..row(50010, "r", 0, 0, false)
        };
        let multirange = TypeRow {
            range: Some(50010),
            ..row(50011, "m", 0, 0, false)
        };
        let old_journal = row(50012, "r", 0, 0, false);
        let rows = TypeRows::new([range, multirange, old_journal]);
        match rows.info(50011).kind {
            TypeKind::Multirange { range } => match range.kind {
                TypeKind::Range { subtype } => assert_eq!(subtype.oid, 25),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        assert!(crate::decode::is_supported(&rows.info(50011)));
        // A journal written before ranges were printed has no subtype.
        assert!(!crate::decode::is_supported(&rows.info(50012)));
        // Built-in ranges need no rows.
        let builtin = TypeRows::default().info(3904);
        assert!(matches!(builtin.kind, TypeKind::Range { .. }));
        assert!(crate::decode::is_supported(&builtin));
    }

    #[test]
    fn composites_resolve_their_attributes_and_keep_dropped_ones() {
        let attr = |typid: u32, len: i16, dropped: bool| TypeAttr {
            typid,
            len,
            byval: len > 0,
            align: "i".into(),
            dropped,
        };
        let comp = TypeRow {
            attrs: Some(vec![
                attr(23, 4, false),
                attr(0, -1, true),
                attr(50000, 4, false),
            ]),
            ..row(50020, "c", 0, 0, false)
        };
        let old_journal = row(50021, "c", 0, 0, false);
        let rows = TypeRows::new([comp, old_journal, row(50000, "e", 0, 0, false)]);
        let info = rows.info(50020);
        let TypeKind::Composite { fields } = &info.kind else {
            panic!("{info:?}")
        };
        assert_eq!(fields.len(), 3);
        assert!(fields[1].dropped && fields[1].ty.len == -1);
        assert!(matches!(fields[2].ty.kind, TypeKind::Enum { .. }));
        assert!(crate::decode::is_supported(&info));
        assert!(!crate::decode::is_supported(&rows.info(50021)));
        // A dropped attribute of a type walfill cannot print does not matter.
        let with_unknown = TypeRow {
            attrs: Some(vec![attr(23, 4, false), attr(0, 4, true)]),
            ..row(50022, "c", 0, 0, false)
        };
        let unknown_live = TypeRow {
            attrs: Some(vec![attr(77777, 4, false)]),
            ..row(50023, "c", 0, 0, false)
        };
        let rows = TypeRows::new([with_unknown, unknown_live]);
        assert!(crate::decode::is_supported(&rows.info(50022)));
        assert!(!crate::decode::is_supported(&rows.info(50023)));
    }

    #[test]
    fn base_types_over_builtin_output_functions_print_like_them() {
        let int42 = TypeRow {
            output: Some("int4out".into()),
            ..row(50030, "b", 0, 0, false)
        };
        let extension = TypeRow {
            output: None,
            ..row(50031, "b", 0, 0, false)
        };
        let unknown = TypeRow {
            output: Some("aclitemout".into()),
            ..row(50032, "b", 0, 0, false)
        };
        let rows = TypeRows::new([int42, extension, unknown, row(50033, "b", 50030, 0, true)]);
        let info = rows.info(50030);
        assert_eq!(info.oid, 50030);
        assert_eq!(info.kind, TypeKind::Base(BaseType::Int4));
        assert_eq!(
            crate::types::output(&info, &42i32.to_le_bytes()).as_deref(),
            Ok("42")
        );
        assert!(crate::decode::is_supported(&rows.info(50033)));
        assert!(!crate::decode::is_supported(&rows.info(50031)));
        assert!(!crate::decode::is_supported(&rows.info(50032)));
    }
}
