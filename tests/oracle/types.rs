//! Columns of every built-in type group walfill prints, compared with
//! test_decoding: edge values, NULLs, arrays, and a domain over each type
//! (which test_decoding quotes even where it prints the base type bare).

use super::Oracle;
use crate::support::TestDb;

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

/// The built-in ranges and multiranges (empty, infinite and inclusive
/// bounds, multiranges long enough to store offsets), their arrays and
/// domains over them, and a user-defined range over text whose bounds need
/// quoting.
#[test]
fn ranges_and_multiranges() {
    let o = Oracle::new(
        "oracle_ranges",
        "CREATE TYPE textrange AS RANGE (subtype = text);
         CREATE TYPE float8range AS RANGE (subtype = float8);
         CREATE DOMAIN dint4range AS int4range;
         CREATE DOMAIN dtsmulti AS tsmultirange;
         CREATE TABLE r (
             id int PRIMARY KEY, i4 int4range, i8 int8range, nr numrange, ts tsrange,
             tstz tstzrange, d daterange, tr textrange, fr float8range,
             i4m int4multirange, i8m int8multirange, nm nummultirange, tsm tsmultirange,
             tstzm tstzmultirange, dm datemultirange, trm textmultirange, frm float8multirange,
             i4a int4range[], tra textrange[], i4ma int4multirange[], tsma tsmultirange[],
             di4 dint4range, dtsm dtsmulti, di4a dint4range[]);",
    );
    o.db.exec(
        r#"INSERT INTO r (id) VALUES (1);
           INSERT INTO r VALUES (2, 'empty', '(,0]', '[1.5,NaN]', '[2000-01-01,infinity)',
               '(,"2024-06-30 12:00:00+02")', '[2000-01-01,2000-01-10]', '["a b","c,d"]',
               '[-Infinity,5e-324)',
               '{[1,3),[5,7),[9,11),[13,15),[17,19),[21,23),[25,27),[29,31),[33,35)}',
               '{[1,2),[4,5),[7,8),[10,11),[13,14)}', '{(,-1e10),[0.001,0.002],[1,1]}',
               '{[2000-01-01,2000-01-02),(,1999-01-01]}', '{[2000-01-01 00:00:00+00,)}',
               '{[2000-01-01,2000-01-05),[2000-02-01,)}', '{["(par)","q\"x"],(z,)}',
               '{[1e300,NaN]}', '{"[1,5)",empty,NULL,"(,)"}', '{"[a,b)","(,\"\")"}',
               '{"{[1,3),[5,7)}","{}",NULL}', '{"{[2000-01-01,2000-01-02)}"}',
               '[3,3]', '{}', '{"[1,2)",NULL}');
           INSERT INTO r (id, tr, trm, nr, tsm) VALUES
               (3, textrange('', NULL), textmultirange(textrange(E'back\\slash', 'tab' || E'\t')),
                numrange(repeat('9', 300)::numeric, NULL),
                (SELECT range_agg(tsrange('2000-01-01'::timestamp + i * interval '2 day',
                                          '2000-01-01'::timestamp + (2 * i + 1) * interval '1 day'))
                   FROM generate_series(1, 20) i));
           UPDATE r SET i4 = '[10,20)', trm = '{}' WHERE id = 2;
           DELETE FROM r WHERE id = 1;"#,
    );
    o.assert_same(&[]);
}

/// Base types whose I/O functions are built-in ones (`LANGUAGE internal`),
/// as PostgreSQL's regression suite declares them.
const BASE_TYPES_OVER_BUILTIN_FUNCTIONS: &str = "
    CREATE TYPE int42;
    CREATE TYPE text_w_default;
    CREATE FUNCTION int42_in(cstring) RETURNS int42 AS 'int4in' LANGUAGE internal STRICT IMMUTABLE;
    CREATE FUNCTION int42_out(int42) RETURNS cstring AS 'int4out' LANGUAGE internal STRICT IMMUTABLE;
    CREATE FUNCTION text_w_default_in(cstring) RETURNS text_w_default AS 'textin'
        LANGUAGE internal STRICT IMMUTABLE;
    CREATE FUNCTION text_w_default_out(text_w_default) RETURNS cstring AS 'textout'
        LANGUAGE internal STRICT IMMUTABLE;
    CREATE TYPE int42 (internallength = 4, input = int42_in, output = int42_out,
                       alignment = int4, default = 42, passedbyvalue);
    CREATE TYPE text_w_default (internallength = variable, input = text_w_default_in,
                                output = text_w_default_out, alignment = int4,
                                default = 'zippo');";

/// User-defined ranges, multiranges, composites and base types described by
/// the catalog journal alone: the tables are created after the slot and
/// dropped before decoding, so the live catalog knows nothing of them. A
/// range over an enum follows a label added part-way, composites follow
/// attributes added and dropped (the journal describes the tables again).
#[test]
fn user_defined_types_described_by_the_journal() {
    let db = TestDb::new("oracle_journal_types");
    crate::journal::install(&db);
    let o = Oracle::on(db);
    o.db.exec(
        r#"CREATE TYPE mood AS ENUM ('sad', 'ok');
           CREATE TYPE moodrange AS RANGE (subtype = mood);
           CREATE TYPE textrange AS RANGE (subtype = text);
           CREATE TABLE j (id int PRIMARY KEY, mr moodrange, mm moodmultirange,
                           tr textrange, tm textmultirange, ma moodrange[]);"#,
    );
    o.db.exec(
        r#"INSERT INTO j VALUES (1, '[sad,ok]', '{[sad,ok)}', '[a,"b c")', '{[a,b),(c,)}',
                                '{"[sad,ok]",NULL,empty}')"#,
    );
    o.db.exec("ALTER TYPE mood ADD VALUE 'happy'");
    o.db.exec(
        "INSERT INTO j VALUES (2, '(ok,happy]', '{(sad,happy]}', NULL, NULL, '{\"[happy,)\"}');
         UPDATE j SET mr = '[happy,happy]', tr = 'empty' WHERE id = 1;",
    );

    // Composites: nested, over the enum and the range, and a table's row
    // type; attributes added and dropped part-way change how later values
    // print, and not how earlier ones do.
    o.db.exec(
        "CREATE TYPE inner_c AS (m mood, r moodrange);
         CREATE TYPE comp AS (i int, gone text, c inner_c);
         CREATE TABLE src (id int PRIMARY KEY, body text);
         CREATE TABLE k (id int PRIMARY KEY, v comp, va comp[], s src);
         INSERT INTO k VALUES (1, ROW(1, 'x', ROW('sad', '[sad,ok)')::inner_c),
                               ARRAY[ROW(2, NULL, NULL)::comp], ROW(1, 'a b'));",
    );
    o.db.exec(
        "ALTER TYPE comp DROP ATTRIBUTE gone;
         ALTER TYPE inner_c ADD ATTRIBUTE t text;
         ALTER TABLE src ADD COLUMN extra numeric;
         INSERT INTO k VALUES (2, ROW(3, ROW('happy', NULL, 'new')::inner_c),
                               ARRAY[ROW(4, NULL)::comp], ROW(2, 'c', 1.5));
         UPDATE k SET va = NULL WHERE id = 1;
         ALTER TABLE src DROP COLUMN body;
         INSERT INTO k (id, s) VALUES (3, ROW(3, 2.5));",
    );

    // Base types declared over built-in I/O functions print as those do.
    o.db.exec(BASE_TYPES_OVER_BUILTIN_FUNCTIONS);
    o.db.exec(
        "CREATE TABLE b (id int PRIMARY KEY, i int42, t text_w_default, ia int42[]);
         INSERT INTO b VALUES (1, '42', 'zippo ''q''', '{1,NULL,-7}');
         INSERT INTO b (id) VALUES (2);",
    );
    o.db.exec("DROP TABLE j, k, b");
    o.assert_same(&[]);
}

/// Composite types: NULL and empty fields, fields that need quoting,
/// nested composites, arrays of them, a table's row type as a column type,
/// a dropped attribute, fields stored compressed inside the value, base
/// types declared over built-in I/O functions, and domains over composites,
/// ranges, arrays and other domains.
#[test]
fn composites_and_domains() {
    let o = Oracle::new(
        "oracle_composites",
        "CREATE TYPE mood AS ENUM ('sad', 'ok');
         CREATE TYPE inner_c AS (a text, b int8, r int4range);
         CREATE TYPE comp AS (i int, gone text, t text, m mood, c inner_c, pts point[], bx box);
         ALTER TYPE comp DROP ATTRIBUTE gone;
         CREATE TABLE src (id int PRIMARY KEY, body text);
         ALTER TABLE src ALTER body SET STORAGE MAIN;
         CREATE DOMAIN dcomp AS comp;
         CREATE DOMAIN ddcomp AS dcomp;
         CREATE DOMAIN dints AS int[];
         CREATE DOMAIN drange AS numrange;
         CREATE TABLE c (
             id int PRIMARY KEY, v comp, va comp[], row_src src, dc dcomp, ddc ddcomp,
             dca dcomp[], di dints, dr drange);",
    );
    o.db.exec(BASE_TYPES_OVER_BUILTIN_FUNCTIONS);
    o.db.exec(
        "CREATE TYPE over_base AS (i int42, t text_w_default);
         ALTER TABLE c ADD COLUMN ob over_base, ADD COLUMN i42 int42;",
    );
    o.db.exec(
        r#"INSERT INTO src VALUES (1, repeat('compressible ', 300)), (2, 'short');
           INSERT INTO c (id) VALUES (1);
           INSERT INTO c VALUES (2,
               ROW(1, 'x y', 'sad', ROW('a,b', 2, '[1,5)')::inner_c, '{"(1,2)",NULL}', '(1,1),(0,0)'),
               ARRAY[ROW(NULL, '', NULL, NULL, NULL, NULL)::comp, NULL,
                     ROW(2, 'q"u\o(t)e', 'ok', ROW(NULL, NULL, 'empty')::inner_c, '{}', NULL)::comp],
               ROW(7, 'seven'), ROW(3, 't', NULL, NULL, NULL, NULL),
               ROW(4, '', 'ok', ROW('', -1, NULL)::inner_c, NULL, NULL), ARRAY[ROW(5, 'f', NULL, NULL, NULL, NULL)::dcomp],
               '{1,2,3}', '[1.5,2)');
           INSERT INTO c (id, v, row_src)
               SELECT 3, ROW(3, s.body, 'ok'::mood, ROW(s.body, 3, NULL)::inner_c, NULL, NULL)::comp, s
                 FROM src s WHERE s.id = 1;
           INSERT INTO c (id, v, ob, i42) VALUES
               (4, ROW(NULL, NULL, NULL, NULL, NULL, NULL), ROW('7', 'a b'), '-42');
           UPDATE c SET v = ROW(9, 'nine', 'sad', NULL, NULL, NULL) WHERE id = 2;"#,
    );
    o.db.exec("DELETE FROM c WHERE id = 1");
    o.assert_same(&[]);
}

/// tsvector (positions and weights, quoting), tsquery (every operator,
/// parentheses where priorities need them, prefix and weight flags), xml
/// (declarations kept, rewritten or dropped as xml_out does) and jsonpath.
#[test]
fn text_search_xml_and_jsonpath() {
    let o = Oracle::new(
        "oracle_text_search",
        "CREATE DOMAIN dtsv AS tsvector;
         CREATE DOMAIN dtsq AS tsquery;
         CREATE DOMAIN dxml AS xml;
         CREATE TABLE ts (
             id int PRIMARY KEY, v tsvector, q tsquery, x xml, va tsvector[], qa tsquery[],
             xa xml[], dv dtsv, dq dtsq, dx dxml, jp jsonpath, jpa jsonpath[]);",
    );
    o.db.exec(
        r#"INSERT INTO ts (id) VALUES (1);
           INSERT INTO ts VALUES (2, 'a:1A,2 b''c:3B bb back\\slash', 'a & !(b | c) <-> d <2> e:*AB',
               '<?xml version="1.1" standalone="yes"?><a>ü &amp; x</a>',
               '{"a:1 b",NULL,""}', '{"a & b",NULL,"!c"}', ARRAY['<a/>'::xml, NULL, 'x y'],
               '', '', '',
               'strict $.a[*] ? (@.b > 1 && @.c like_regex "^x" flag "i").datetime("HH24:MI")',
               ARRAY['$'::jsonpath, NULL, '-($.a + 1) * 2']);
           INSERT INTO ts (id, v, q, x, dx) VALUES
               (3, to_tsvector('english', 'The quick brown foxes jumped over the lazy dogs'),
                phraseto_tsquery('english', 'quick brown fox') || to_tsquery('english', 'lazy:*'),
                E'<?xml version="1.0"?>\n<doc><p k="v">text</p><!-- c --></doc>',
                xmlroot(xml '<r/>', version '1.1', standalone no)),
               (4, (SELECT string_agg('w' || i || ':' || i, ' ')::tsvector FROM generate_series(1, 500) i),
                (SELECT string_agg('t' || i, ' | ')::tsquery FROM generate_series(1, 200) i),
                XMLPARSE(DOCUMENT '<?xml version="1.0" standalone="no"?><!DOCTYPE d><d/>'), NULL);
           UPDATE ts SET q = '!!a <-> (b <-> c)', x = E'\n<after/>', jp = '$.**{2 to last}' WHERE id = 2;
           DELETE FROM ts WHERE id = 1;"#,
    );
    o.assert_same(&[]);
}
