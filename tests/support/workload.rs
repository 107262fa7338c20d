//! Tables and concurrent writers used by the end-to-end tests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::TestDb;

/// The transform most tests use over [`create_orders`].
pub const ORDERS_SELECT: &str =
    "id, customer_id, upper(status) AS status, total_cents / 100.0 AS total, note";
/// Its filter.
pub const ORDERS_WHERE: &str = "status <> 'test'";

/// `public.orders` with `rows` rows (ids 1..=rows), analyzed.
pub fn create_orders(db: &TestDb, rows: i64) {
    db.exec(&orders_sql(rows));
}

/// The statements [`create_orders`] runs, for a session of the test's own.
pub fn orders_sql(rows: i64) -> String {
    format!(
        "CREATE TABLE orders (
             id bigint PRIMARY KEY, customer_id int, status text NOT NULL,
             total_cents bigint, note text);
         INSERT INTO orders
         SELECT g, g % 97, CASE WHEN g % 10 = 0 THEN 'test' ELSE 'open' END, g * 7,
                CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END
           FROM generate_series(1, {rows}) g;
         ANALYZE orders;"
    )
}

/// The target section for [`create_orders`].
pub fn orders_target(version: &str) -> String {
    format!(
        "[[target]]\nname = \"orders_summary\"\nsource = \"public.orders\"\nkey = [\"id\"]\n\
         select = \"{ORDERS_SELECT}\"\nwhere = \"{ORDERS_WHERE}\"\nversion = \"{version}\"\n\
         schema = \"derived\"\n"
    )
}

/// A thread writing to `orders` in small transactions until stopped:
/// inserts, updates (status in and out of the filter), deletes and key changes.
pub struct Writer {
    stop: Arc<AtomicBool>,
    /// Statements run so far.
    done: Arc<AtomicU64>,
    handle: JoinHandle<u64>,
}

/// A tiny deterministic generator, so failures can be replayed by seed.
pub struct Lcg(pub u64);

impl Lcg {
    /// Next value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

impl Writer {
    /// Starts writing; new keys start above `first_new_key`.
    pub fn start(db: &TestDb, key_range: i64, first_new_key: i64, seed: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let done = Arc::new(AtomicU64::new(0));
        let counted = done.clone();
        let mut client = db.client();
        let handle = std::thread::spawn(move || {
            let mut rng = Lcg(seed);
            let mut next = first_new_key;
            let mut ops = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let mut tx = client.transaction().expect("begin");
                for _ in 0..=rng.below(4) {
                    let id = 1 + rng.below(key_range as u64) as i64;
                    let sql = match rng.below(10) {
                        0..=2 => {
                            next += 1;
                            format!(
                                "INSERT INTO orders VALUES ({next}, {}, 'new', {}, 'w{ops}')",
                                rng.below(97),
                                rng.below(100_000)
                            )
                        }
                        3..=5 => format!(
                            "UPDATE orders SET status = '{}', total_cents = total_cents + 1 WHERE id = {id}",
                            ["paid", "test", "open"][rng.below(3) as usize]
                        ),
                        6 => format!("UPDATE orders SET note = NULL WHERE id = {id}"),
                        7 | 8 => format!("DELETE FROM orders WHERE id = {id}"),
                        _ => {
                            next += 1;
                            format!("UPDATE orders SET id = {next} WHERE id = {id}")
                        }
                    };
                    tx.batch_execute(&sql).expect(&sql);
                    ops += 1;
                }
                tx.commit().expect("commit");
                counted.store(ops, Ordering::Relaxed);
            }
            ops
        });
        Writer { stop, done, handle }
    }

    /// Waits until at least `ops` statements have committed (a minute at
    /// most): history written while something else runs.
    pub fn wait_for_ops(&self, ops: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.done.load(Ordering::Relaxed) < ops {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer ran {} statements in a minute, fewer than {ops}",
                self.done.load(Ordering::Relaxed)
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Stops and returns the number of statements run.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("writer thread")
    }
}
