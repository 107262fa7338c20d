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

/// point, lseg, box (whose arrays are delimited by `;`), line, circle,
/// path (open and closed) and polygon, with special floats.
#[test]
fn geometric_types() {
    let o = Oracle::new(
        "oracle_geometry",
        "CREATE DOMAIN dpoint AS point;
         CREATE DOMAIN dbox AS box;
         CREATE DOMAIN dpath AS path;
         CREATE DOMAIN dpoly AS polygon;
         CREATE DOMAIN dcircle AS circle;
         CREATE DOMAIN dline AS line;
         CREATE DOMAIN dlseg AS lseg;
         CREATE TABLE g (
             id int PRIMARY KEY, p point, l lseg, bx box, ln line, c circle, pa path, po polygon,
             pa_ point[], la lseg[], bxa box[], lna line[], ca circle[], paa path[], poa polygon[],
             dp dpoint, dbx dbox, dpa dpath, dpo dpoly, dc dcircle, dln dline, dl dlseg,
             dbxa dbox[]);",
    );
    o.db.exec(
        "INSERT INTO g (id) VALUES (1);
         INSERT INTO g VALUES (2, '(1.5,-0)', '[(0,0),(1e300,1e-300)]', '(1,1),(0,0)',
             '{1,-2,0.5}', '<(0,0),1>', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(2,0))',
             '{\"(1,2)\",NULL,\"(NaN,Infinity)\"}', '{\"[(0,0),(1,1)]\"}',
             '{(1,1),(0,0);(3,3),(2,2);NULL}', '{\"{1,2,3}\",NULL}', '{\"<(1,2),3.5>\"}',
             '{\"((1,2))\",\"[(0,0),(5e-324,1)]\"}', '{\"((0,0),(1,1),(2,0))\",NULL}',
             '(-Infinity,0.1)', '(2,2),(2,2)', '((1,2),(3,4))', '((1,2))', '<(1e-10,1e10),0>',
             '[(0,0),(1,1)]', '((1.5,2.5),(-3,4e20))', '{(1,1),(0,0);(2,2),(-1,-1)}');
         INSERT INTO g (id, p, pa, po) VALUES
             (3, point(1.7976931348623157e308, 5e-324),
              (SELECT ('[' || string_agg(format('(%s,%s)', i, i * 0.1), ',') || ']')::path
                 FROM generate_series(1, 300) i),
              (SELECT ('(' || string_agg(format('(%s,%s)', i, -i / 3.0), ',') || ')')::polygon
                 FROM generate_series(1, 300) i));
         UPDATE g SET p = '(NaN,NaN)', c = '<(1,1),0.25>' WHERE id = 2;
         DELETE FROM g WHERE id = 1;",
    );
    o.assert_same(&[]);
}
