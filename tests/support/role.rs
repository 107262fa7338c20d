//! Login roles for tests of privileges.

use std::sync::atomic::{AtomicU32, Ordering};

use super::cluster::{admin_url, connect};
use super::TestDb;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A login role without superuser (password `pw`) and with the given
/// attributes, dropped when the guard goes: declare it before the databases
/// it has privileges in, so that they are dropped first.
pub struct Role(pub String);

impl Role {
    /// A role named after `tag`, unique to this test process.
    pub fn create(tag: &str, attributes: &str) -> Role {
        let name = format!(
            "wf_{tag}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        connect(&admin_url())
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN NOSUPERUSER {attributes} PASSWORD 'pw'"
            ))
            .expect("creating a role");
        Role(name)
    }

    /// `db`'s URL with this role's credentials.
    pub fn url(&self, db: &TestDb) -> String {
        let mut url = url::Url::parse(&db.url()).expect("a database URL");
        url.set_username(&self.0).expect("a URL with a user");
        url.set_password(Some("pw")).expect("a URL with a password");
        url.to_string()
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = connect(&admin_url()).batch_execute(&format!("DROP ROLE IF EXISTS {}", self.0));
    }
}
