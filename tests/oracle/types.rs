//! Columns of every built-in type group walfill prints, compared with
//! test_decoding: edge values, NULLs, arrays, and a domain over each type
//! (which test_decoding quotes even where it prints the base type bare).

use super::Oracle;

/// bit and varbit (printed `B'…'` by test_decoding), macaddr8, the
/// transaction and command IDs, tid, int2vector, oidvector, refcursor and
/// the snapshot types.
#[test]
fn bits_ids_and_vectors() {
    let o = Oracle::new(
        "oracle_bits_ids",
        r#"CREATE DOMAIN dbit AS bit(4);
           CREATE DOMAIN dvarbit AS varbit;
           CREATE DOMAIN dmac8 AS macaddr8;
           CREATE DOMAIN dxid AS xid;
           CREATE DOMAIN dxid8 AS xid8;
           CREATE DOMAIN dcid AS cid;
           CREATE DOMAIN dtid AS tid;
           CREATE DOMAIN dint2v AS int2vector;
           CREATE DOMAIN doidv AS oidvector;
           CREATE TABLE b (
               id int PRIMARY KEY, bt bit(4), vb varbit, m8 macaddr8, x xid, x8 xid8, c cid,
               ti tid, i2v int2vector, ov oidvector, rc refcursor, snap pg_snapshot,
               tsnap txid_snapshot,
               bta bit(4)[], vba varbit[], m8a macaddr8[], xa xid[], x8a xid8[], ca cid[],
               tia tid[], i2va int2vector[], ova oidvector[], rca refcursor[], snapa pg_snapshot[],
               dbt dbit, dvb dvarbit, dm8 dmac8, dx dxid, dx8 dxid8, dc dcid, dti dtid,
               di2v dint2v, dov doidv, dbta dbit[]);"#,
    );
    o.db.exec(
        r#"INSERT INTO b (id) VALUES (1);
           INSERT INTO b VALUES (2, B'1010', B'', '08:00:2b:01:02:03:04:05', '0', '0', '0',
               '(0,0)', '', '', '', '10:20:10,14,15', '3:3:',
               '{1010,NULL}', '{"",1,101010101}', '{08:00:2b:01:02:03,NULL}', '{0,NULL,4294967295}',
               '{18446744073709551615,0}', '{7,NULL}', '{"(0,1)",NULL,"(4294967295,65535)"}',
               '{"1 2",3,"",NULL}', '{"26 23",NULL,""}', '{a,"b c","",NULL}',
               '{"10:20:10,14",NULL}',
               B'0001', B'1', 'ff:ff:ff:ff:ff:ff:ff:ff', '4294967295', '18446744073709551615',
               '4294967295', '(65536,1)', '-32768 32767', '4294967295 0', '{1111,0000}');
           INSERT INTO b (id, vb, m8, x, x8, ti, i2v, ov, rc, snap, tsnap) VALUES
               (3, repeat('10', 70)::varbit, '0000.0000.0000.0000', txid_current()::text::xid,
                pg_current_xact_id(), '(65535,256)', '5', '26', 'with ''quote''',
                pg_current_snapshot(), txid_current_snapshot());
           UPDATE b SET bt = B'1111', x = '3', c = '1' WHERE id = 2;
           DELETE FROM b WHERE id = 1;"#,
    );
    o.assert_same(&[]);
}
